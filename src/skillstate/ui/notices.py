"""The line a page shows after a form's write ("replied as version 3"), and only that.

A form's write answers with a redirect to the task's page, carrying the message in
the URL. Anyone can write a URL, so the message is signed: an HMAC under a key the
server draws at start, over the task id and the text. A page shows the notice only
when the signature matches; a link with made-up text (``?notice=Call this number``)
shows nothing. The key never leaves the process, so a restart voids old links.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

from starlette.requests import Request

__all__ = ["notice_of", "notice_query"]

_NOTICE, _SIGNATURE = "notice", "sig"


def _mac(key: bytes, task_id: str, text: str) -> str:
    data = f"{task_id}\x00{text}".encode("utf-8", "surrogatepass")
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:32]


def notice_query(key: bytes, task_id: str, text: str) -> str:
    """The query string that makes ``task_id``'s page show ``text``."""
    return urlencode({_NOTICE: text, _SIGNATURE: _mac(key, task_id, text)})


def notice_of(key: bytes, request: Request, task_id: str) -> str | None:
    """The signed notice in ``request``'s URL, or ``None`` (absent, altered or made up)."""
    text = request.query_params.get(_NOTICE)
    given = request.query_params.get(_SIGNATURE)
    if not text or not given:
        return None
    if not hmac.compare_digest(given.encode("utf-8", "replace"), _mac(key, task_id, text).encode()):
        return None
    return text
