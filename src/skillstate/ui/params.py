"""What a URL may ask for: whole numbers in paths and queries, pages, page sizes.

Anyone who can open a page can write its URL, so every number in one is read here,
bounded: a version, a report or a page is a whole number of at most
:data:`MAX_DIGITS` ASCII digits (a 5,000-digit one would fail int-string
conversion, a 30-digit one overflows the stores' 64-bit integers), and a page
size is clamped to :data:`MAX_PAGE_SIZE`. Anything else is a one-line 400, or a
404 for a path that names no such thing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.convertors import Convertor, register_url_convertor

from skillstate.errors import UsageError

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["MAX_DIGITS", "MAX_PAGE_SIZE", "WHOLE", "int_param", "page_param", "size_param"]

MAX_DIGITS = 15
"""The longest number a URL may hold (below 2**53: any store, and JavaScript, hold it)."""
MAX_PAGE_SIZE = 200
"""The most rows one page of the task list may ask for (``?size=``)."""
_NUMBER = re.compile(f"-?[0-9]{{1,{MAX_DIGITS}}}")


class _Whole(Convertor[int]):
    """``{name:whole}``: a path segment of 1 to 15 digits; any other segment matches no
    route (a 404), where Starlette's ``int`` would fail on 5,000 digits (a 500)."""

    regex = f"[0-9]{{1,{MAX_DIGITS}}}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(int(value))


WHOLE = "whole"
register_url_convertor(WHOLE, _Whole())


def int_param(request: Request, name: str, default: int | None = None) -> int | None:
    """A query parameter that must be a whole number (absent or empty: ``default``)."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not _NUMBER.fullmatch(text):
        raise UsageError(
            f"{name} must be a whole number of at most {MAX_DIGITS} digits, not {text[:20]!r}"
        )
    return int(text)


def page_param(request: Request) -> int | None:
    """``?page=``: 1 or more (past the last page shows the last); absent: ``None``."""
    page = int_param(request, "page")
    if page is not None and page < 1:
        raise UsageError(f"page must be 1 or more, not {page}")
    return page


def size_param(request: Request, default: int) -> int:
    """``?size=``: 1 or more, at most :data:`MAX_PAGE_SIZE` (a larger one is clamped)."""
    size = int_param(request, "size")
    if size is None:
        return min(default, MAX_PAGE_SIZE)
    if size < 1:
        raise UsageError(f"size must be 1 or more, not {size}")
    return min(size, MAX_PAGE_SIZE)
