"""``--propose-schema``: the state class of a new agent, inferred from a proposal's facts.

Each fact becomes a typed field, ``NAME: TYPE | None = None``, its type read off the
value the conversation gave (``true`` a ``bool``, ``3`` an ``int``, ``2.5`` a
``float``, text a ``str``, a list of one kind ``list[...]``, an object ``dict[str,
Any]``), with the turn it came from in a comment. The source is checked before it is
returned: it compiles, defines an :class:`~skillstate.state.model.AgentState`
subclass, and the facts validate against it. Types are a first draft for a person to
tighten (a ``Literal`` of the values a field may take, say); nothing here guesses more.
"""

from __future__ import annotations

import keyword
import os
import re
import sys
import tempfile
import types
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.errors import UsageError
from skillstate.extract.proposal import Fact, Proposal
from skillstate.state.model import AgentState

__all__ = ["load_state_class", "propose_schema", "write_text_atomic"]

_CLASS = re.compile(r"^[A-Z][A-Za-z0-9_]{0,63}$")


def propose_schema(proposal: Proposal, *, class_name: str = "ExtractedState") -> str:
    """Python source of an ``AgentState`` subclass with one typed field per fact."""
    if not _CLASS.match(class_name):
        raise UsageError(f"class name {class_name!r} is not a Python class name (CamelCase)")
    fields = _fields(proposal.facts)
    uses_any = any("Any" in kind for _, kind, _ in fields)
    lines = [
        f'"""The state class skillstate extract proposes from {_safe(proposal.transcript.source)}.',
        "",
        "Types are read off the values the conversation gave: review them before use.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        *(["from typing import Any", ""] if uses_any else []),
        "from skillstate import AgentState",
        "",
        "",
        f"class {class_name}(AgentState):",
        f'    """The card of a task like the one in {_safe(proposal.transcript.source)}."""',
        "",
    ]
    if not fields:
        lines.append("    pass  # the conversation established no fact")
    for name, kind, fact in fields:
        turns = ", ".join(str(t) for t in fact.turns) or "the review"
        lines.append(f"    {name}: {kind} | None = None  # turn {turns}: {_safe(fact.quote, 60)}")
    source = "\n".join(lines) + "\n"
    cls = load_state_class(source, class_name)
    values = {name: fact.value for name, _, fact in fields}
    try:
        cls.model_validate({"task_id": "proposed", **values})
    except ValidationError as exc:  # a bug here: the types were read off these values
        raise UsageError(f"the proposed schema refuses its own facts: {first_error(exc)}") from None
    return source


def load_state_class(source: str, class_name: str) -> type[AgentState]:
    """The class ``class_name`` that ``source`` defines, checked to be an ``AgentState``."""
    name = f"skillstate_proposed_schema_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name)
    # Imported as a module is, so pydantic resolves the postponed annotations (`Any`)
    # in its namespace; it leaves sys.modules once the class is built.
    sys.modules[name] = module
    try:
        exec(compile(source, "<proposed schema>", "exec"), module.__dict__)
    except Exception as exc:
        raise UsageError(
            f"the proposed schema does not load: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        sys.modules.pop(name, None)
    cls = module.__dict__.get(class_name)
    if not (isinstance(cls, type) and issubclass(cls, AgentState)):
        raise UsageError(f"the proposed schema defines no AgentState subclass {class_name!r}")
    return cls


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write {target.name}: {exc.strerror or exc}") from None


def _fields(facts: Sequence[Fact]) -> list[tuple[str, str, Fact]]:
    out: dict[str, tuple[str, str, Fact]] = {}
    for fact in facts:
        name = fact.key.removeprefix("facts.").replace("-", "_")
        if not name.isidentifier() or keyword.iskeyword(name):
            name = f"{name}_"
        if not name.isidentifier() or name in AgentState.model_fields or name.startswith("_"):
            continue  # a base card field (or no name at all): it stays in `facts`
        out[name] = (name, _kind(fact.value), fact)
    return list(out.values())


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        return "dict[str, Any]"
    if isinstance(value, list):
        kinds = {_kind(v) for v in value}
        if kinds == {"int", "float"}:
            kinds = {"float"}
        return f"list[{kinds.pop()}]" if len(kinds) == 1 else "list[Any]"
    return "Any"


def _safe(text: str, n: int = 80) -> str:
    """Text that can sit in a comment or a docstring: one line, no quotes run, bounded."""
    one = " ".join(text.split()).replace('"""', "'''").replace("\\", "/")
    return one if len(one) <= n else one[: n - 1] + "…"
