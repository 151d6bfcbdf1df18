"""Secret params of a step: sealed where they are kept, real where they are used.

An effect runs from its committed *intent*, so that a resume after ``kill -9`` runs
exactly what was decided. The intent is part of the card, and the card is masked
wherever it leaves the process: a masked intent would hand ``"***"`` to the outside
world, verify would pass, and the task would complete, wrong and silent. So the
leaves of an intent's params that the agent's redaction policy would mask are
**sealed** instead, as ``Sensitive`` fields are (``enc:v1:...`` under
``SKILLSTATE_KEY``): the store, the event log, the views and the traces hold
ciphertext, and the skill, its probe, verify and rollback get the plaintext back
(:func:`open_params`). The settling event carries the same sealed params, so a
compensating rollback, which reads them from the ledger of effects, undoes the
effect with the real values too.

Without a key a secret param cannot be kept: :func:`seal_params` refuses
(:class:`~skillstate.errors.SecretKeyMissing`), before anything is committed or run,
rather than store it in the clear or hand the world a mask.

The plaintext of a step's secret params also joins the exact values its redactor
masks (:func:`secret_leaves`), so a verify reason or an exception message that
quotes ``hunter2`` reaches the error log, the event and a span status as ``***``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from skillstate.errors import SecretKeyMissing
from skillstate.state.redact import Redactor
from skillstate.state.secrets import ENV_KEY, MASK, is_sealed, leaf_texts, open_text, seal_text

__all__ = [
    "masked_params",
    "open_params",
    "seal_params",
    "secret_leaves",
    "secret_texts",
]

_Path = tuple[str | int, ...]


def secret_leaves(value: Any, redactor: Redactor) -> list[tuple[_Path, Any]]:
    """The leaves (or whole subtrees) of the JSON ``value`` that ``redactor`` masks.

    A string the policy masks only in part (``postgresql://admin:***@db``) is a leaf
    as a whole: it is the value a skill receives. Sealed values are not secret
    leaves: they are kept as they are.
    """
    masked = redactor.json(value)
    if masked is value:
        return []
    return list(_diff(value, masked, ()))


def _diff(value: Any, masked: Any, path: _Path) -> Iterator[tuple[_Path, Any]]:
    if masked is value:
        return
    if isinstance(value, dict) and isinstance(masked, dict) and masked.keys() == value.keys():
        for key, item in value.items():
            yield from _diff(item, masked[key], (*path, key))
    elif (
        isinstance(value, (list, tuple))
        and isinstance(masked, (list, tuple))
        and len(value) == len(masked)
    ):
        for i, item in enumerate(value):
            yield from _diff(item, masked[i], (*path, i))
    elif masked != value:
        yield path, value


def secret_texts(value: Any, redactor: Redactor) -> tuple[str, ...]:
    """The plaintext of :func:`secret_leaves`, to mask exactly elsewhere.

    A string masked only in part gives the parts that were masked (``S3cret`` of a
    database URL), so the rest of it stays readable where it is quoted."""
    out: list[str] = []
    for _, leaf in secret_leaves(value, redactor):
        masked = redactor.json(leaf)
        if isinstance(leaf, str) and isinstance(masked, str):
            out += _masked_parts(leaf, masked)
        else:
            leaf_texts(leaf, out)
    return tuple(dict.fromkeys(out))


def _masked_parts(text: str, masked: str) -> list[str]:
    """What ``masked`` hides of ``text``: the text between the pieces it kept (the whole
    text when the two do not line up)."""
    pieces = masked.split(MASK)
    parts: list[str] = []
    at = 0
    for i, piece in enumerate(pieces):
        found = text.find(piece, at) if i else (0 if text.startswith(piece) else -1)
        if found < 0:
            return [text]
        if i:
            parts.append(text[at:found])
        at = found + len(piece)
    if pieces[-1] and not text.endswith(pieces[-1]):
        return [text]
    return [p for p in parts if p] or [text]


def seal_params(
    params: Mapping[str, Any], redactor: Redactor, *, skill: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``params`` with every leaf ``redactor`` would mask sealed; and their plaintexts.

    Raises :class:`SecretKeyMissing` when there is such a leaf and no key is set.
    """
    out: dict[str, Any] = dict(params)
    found = secret_leaves(out, redactor)
    plain: list[str] = []
    for path, leaf in found:
        text = json.dumps(leaf, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        token = seal_text(f"param:{skill}:{_pointer(path)}", text)
        if token is None:
            raise SecretKeyMissing(
                f"skill {skill!r} is an effect and its param {_pointer(path)!r} holds a value "
                f"the agent's redaction policy masks: its intent is kept sealed so the effect "
                f"gets the real value after a crash. Set {ENV_KEY} (skillstate keygen), or "
                "exempt the name in the agent's RedactionPolicy(exempt_names=...)"
            )
        out = _replace(out, path, token)
        leaf_texts(leaf, plain)
    return out, tuple(dict.fromkeys(plain))


def open_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every sealed leaf opened (its JSON value back).

    Raises :class:`SecretKeyMissing` when a leaf is sealed and no key set opens it.
    """
    opened: dict[str, Any] = _walk(dict(params), _open)
    return opened


def masked_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every sealed leaf shown as ``"***"`` (for a stable, short rendering)."""
    shown: dict[str, Any] = _walk(dict(params), lambda token: MASK)
    return shown


def _open(token: str) -> Any:
    text = open_text("param", token)
    if text is None:
        raise SecretKeyMissing(
            f"an effect's param is sealed: set {ENV_KEY} to the key it was stored with"
        )
    return json.loads(text)


def _walk(value: Any, fn: Any) -> Any:
    """``value`` with ``fn(token)`` in place of every sealed string (copied where changed)."""
    if isinstance(value, str):
        return fn(value) if is_sealed(value) else value
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, fn) for v in value]
    return value


def _replace(value: Any, path: _Path, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    items = list(value)
    assert isinstance(head, int)
    items[head] = _replace(items[head], rest, new)
    return items


def _pointer(path: _Path) -> str:
    return "/".join(str(p) for p in path) or "(params)"
