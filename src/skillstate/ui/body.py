"""The body of a write: read within a bound, parsed strictly, each field typed.

By the time anything here runs, the write's token has been checked (a form's token
rides in its body: :mod:`skillstate.ui.actions` reads that body within the same
bound and compares the token before any other field is used). Whatever the body
holds, the answer is a 4xx with a one-line message, never a 500: a body over
:data:`MAX_BODY` bytes (declared, or counted while a chunked body is read) is a
413; a body that is not UTF-8, not JSON, or JSON that could not be stored (nested
too deeply, a lone surrogate, NaN or infinity, a number of more than 15 digits, a
repeated key) is a 400; so is a field of the wrong type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException

from skillstate.errors import UsageError
from skillstate.limits import edit_problem, problem
from skillstate.ui.config import MAX_BODY
from skillstate.ui.params import MAX_DIGITS

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = [
    "MAX_BODY",
    "Refused",
    "choice",
    "flag",
    "form_fields",
    "json_object",
    "lines",
    "media_type",
    "read_body",
    "text",
    "whole",
]

MAX_FIELDS = 16
_NUMBER = re.compile(f"-?[0-9]{{1,{MAX_DIGITS}}}")
_TRUE, _FALSE = {"1", "true", "on", "yes"}, {"", "0", "false", "off", "no"}


class Refused(HTTPException):
    """A refusal that names what was wrong (the JSON error's ``kind``)."""

    def __init__(self, status_code: int, detail: str, kind: str) -> None:
        super().__init__(status_code, detail)
        self.kind = kind


def _too_large(limit: int) -> Refused:
    return Refused(413, f"the body is over the inspector's bound of {limit} bytes", "BodyTooLarge")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed ``limit`` bytes.

    A declared ``Content-Length`` over the bound is refused before a byte is read;
    a chunked body (or one that lies about its length) is counted as it arrives.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isascii() or not declared.isdigit() or len(declared) > 18:
            raise Refused(400, "Content-Length is not a number of bytes", "BadRequest")
        if int(declared) > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def media_type(request: Request) -> str:
    """The request's media type, lower case, without its parameters."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"the body is not UTF-8 (byte {exc.start})") from None


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON can hold")


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise ValueError(f"a number in the body has more than {MAX_DIGITS} digits")
    return int(digits)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key[:40]!r} appears twice")
        out[key] = value
    return out


def json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object of fields (see the module docstring for what is refused)."""
    body = _utf8(raw)
    if not body.strip():
        raise UsageError("the body is empty: send a JSON object of fields")
    try:
        data = json.loads(body, parse_constant=_constant, parse_int=_int, object_pairs_hook=_object)
    except RecursionError:
        raise UsageError(
            "the body is not JSON the inspector reads: it is nested too deeply"
        ) from None
    except ValueError as exc:  # JSONDecodeError, and the hooks' refusals
        raise UsageError(f"the body is not valid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"the body must be a JSON object of fields, not {type(data).__name__}")
    found = problem(data, chars=2 * MAX_BODY, depth=4)
    if found is not None:
        raise UsageError(f"the body refused: {found}")
    return data


def form_fields(raw: bytes) -> dict[str, str]:
    """A URL-encoded form (what the pages' forms send), decoded strictly."""
    try:
        pairs = parse_qsl(
            _utf8(raw), keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS
        )
    except UnicodeDecodeError:
        raise UsageError("the form is not UTF-8") from None
    except ValueError:
        raise UsageError(f"the form has more than {MAX_FIELDS} fields") from None
    fields: dict[str, str] = {}
    for key, value in pairs:
        if key in fields:
            raise UsageError(f"the form field {key[:40]!r} appears twice")
        fields[key] = value
    return fields


def only(fields: Mapping[str, Any], names: Collection[str], action: str) -> None:
    """Refuse a field ``action`` does not take (a typo would otherwise be ignored)."""
    for name in fields:
        if name not in names:
            takes = ", ".join(sorted(names))
            raise UsageError(f"{action} takes {takes}; not {name[:40]!r}")


def text(fields: Mapping[str, Any], name: str) -> str:
    """A required, non-blank string without control characters (but line breaks and tabs)."""
    value = fields.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise UsageError(f"{name} is required")
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string, not {_kind(value)}")
    value = value.replace("\r\n", "\n")  # a browser's line breaks
    found = edit_problem(value)
    if found is not None:
        raise UsageError(f"{name} refused: {found}")
    return value


def whole(fields: Mapping[str, Any], name: str) -> int:
    """A required whole number: a JSON integer, or its digits (a form's field)."""
    value = fields.get(name)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if value is None or value == "":
        raise UsageError(f"{name} is required")
    shown = repr(value[:20]) if isinstance(value, str) else _kind(value)
    raise UsageError(f"{name} must be a whole number, not {shown}")


def flag(fields: Mapping[str, Any], name: str) -> bool:
    """An optional yes/no: a JSON boolean, or a form's checkbox (``1``, ``on``; absent: no)."""
    value = fields.get(name, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise UsageError(f"{name} must be true or false, not {_kind(value)}")


def choice(fields: Mapping[str, Any], name: str, options: Collection[str], default: str) -> str:
    """An optional string among ``options`` (absent or empty: ``default``)."""
    value = fields.get(name) or default
    if not isinstance(value, str) or value not in options:
        shown = repr(value[:40]) if isinstance(value, str) else _kind(value)
        raise UsageError(f"{name} must be one of {', '.join(options)}, not {shown}")
    return value


def lines(fields: Mapping[str, Any], name: str) -> list[str]:
    """``PATH=VALUE`` assignments: one string of lines (a form's textarea), or a list of
    strings (one assignment each). Blank lines are skipped."""
    value = fields.get(name)
    if isinstance(value, str):
        items = value.replace("\r\n", "\n").split("\n")
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = list(value)
    elif value is None:
        items = []
    else:
        raise UsageError(f"{name} must be a string of PATH=VALUE lines or a list of them")
    items = [item for item in items if item.strip()]
    if not items:
        raise UsageError(f"{name} is required: PATH=VALUE, one per line")
    for item in items:
        found = edit_problem(item)
        if found is not None:
            raise UsageError(f"assignment {item.partition('=')[0][:40]!r} refused: {found}")
    return items


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}"
    )
