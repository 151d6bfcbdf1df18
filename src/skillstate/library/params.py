"""``input_params`` of a skill file as a pydantic model (built with ``create_model``).

Each param is a JSON-schema-like mapping, or the bare name of its type::

    input_params:
      metric: string                                   # required
      group_by: {type: string, enum: [channel, region], default: channel}
      limit: {type: integer, minimum: 1, maximum: 500, description: rows to keep}
      columns: {type: array, items: string, required: false}

Types: ``string``, ``integer``, ``number``, ``boolean``, ``array`` (``items``: the
type of its items), ``object``. A param is required unless it has a ``default`` or
``required: false`` (then it defaults to null). The model forbids unknown params,
like the params model of a Python skill should.
"""

from __future__ import annotations

import keyword
import re
import warnings
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from skillstate._validation import first_error
from skillstate.errors import UsageError

__all__ = ["params_model"]

_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict[str, Any],
}
_KEYS = frozenset(
    {
        "type",
        "description",
        "default",
        "enum",
        "required",
        "items",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
    }
)
_CONSTRAINTS = {
    "minimum": "ge",
    "maximum": "le",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid")


def params_model(skill: str, spec: Any, *, where: str) -> type[BaseModel]:
    """The params model of ``skill`` from its ``input_params`` (``where`` names it in errors)."""
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise UsageError(f"{where}: expected a mapping of param name to type")
    fields: dict[str, Any] = {}
    for name, item in spec.items():
        at = f"{where}.{name}"
        if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
            raise UsageError(f"{at}: a param name is a Python identifier (letters, digits, _)")
        if name in BaseModel.__dict__ or hasattr(BaseModel, name):
            raise UsageError(f"{at}: {name!r} is reserved (it shadows a pydantic attribute)")
        fields[name] = _field(item, at)
    model_name = "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", skill) if p)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a shadowing warning is a refusal, not noise
            model: type[BaseModel] = create_model(
                f"{model_name or 'Skill'}Params", __base__=_Forbid, **fields
            )
    except Exception as exc:  # pydantic's, about a field it cannot build
        raise UsageError(f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    return model


def _field(item: Any, at: str) -> tuple[Any, Any]:
    """``(annotation, FieldInfo)`` of one param."""
    if isinstance(item, str):
        item = {"type": item}
    if not isinstance(item, Mapping):
        raise UsageError(f"{at}: expected a type name or a mapping with `type`")
    unknown = sorted(set(item) - _KEYS)
    if unknown:
        raise UsageError(
            f"{at}: unknown key(s) {', '.join(map(str, unknown))} "
            f"(known: {', '.join(sorted(_KEYS))})"
        )
    annotation = _annotation(item.get("type"), item.get("items"), at)
    enum = item.get("enum")
    if enum is not None:
        if not isinstance(enum, list) or not enum:
            raise UsageError(f"{at}.enum: expected a non-empty list")
        if not all(isinstance(v, str | int | bool) for v in enum):
            raise UsageError(f"{at}.enum: values are strings, integers or booleans")
        annotation = Literal[tuple(enum)]
    options = _options(item, at)
    required = item.get("required", "default" not in item)
    if not isinstance(required, bool):
        raise UsageError(f"{at}.required: expected true or false")
    if "default" in item:
        if required is True and "required" in item:
            raise UsageError(f"{at}: a param with a default is not required")
        try:  # a default of the wrong type fails here, not on the first call
            TypeAdapter(annotation).validate_python(item["default"], strict=True)
        except ValidationError as exc:
            raise UsageError(f"{at}.default: {first_error(exc, 'default')}") from None
        return annotation, Field(default=item["default"], **options)
    if not required:
        return annotation | None, Field(default=None, **options)
    return annotation, Field(**options)


def _options(item: Mapping[str, Any], at: str) -> dict[str, Any]:
    """The ``Field`` options of a param: its constraints and description."""
    options = {option: item[key] for key, option in _CONSTRAINTS.items() if key in item}
    if "description" in item:
        if not isinstance(item["description"], str):
            raise UsageError(f"{at}.description: expected a string")
        options["description"] = item["description"]
    return options


def _annotation(kind: Any, items: Any, at: str) -> Any:
    if kind == "array":
        inner = Any if items is None else _annotation(items, None, f"{at}.items")
        return list[inner]  # type: ignore[valid-type]
    if items is not None:
        raise UsageError(f"{at}.items: only an array has items")
    if not isinstance(kind, str) or kind not in _TYPES:
        raise UsageError(
            f"{at}.type: expected one of {', '.join([*_TYPES, 'array'])}, got {kind!r}"
        )
    return _TYPES[kind]
