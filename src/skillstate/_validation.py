"""One-line rendering of pydantic validation errors, for messages users read."""

from __future__ import annotations

from pydantic import ValidationError


def first_error(exc: ValidationError, default: str = "value") -> str:
    """``where: what`` of the first error, with a count of the others."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or default
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"
