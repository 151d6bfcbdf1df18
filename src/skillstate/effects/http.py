"""An HTTP call that carries its idempotency key, so the server can tell a repeat.

:func:`idempotent_request` sends the key as the ``Idempotency-Key`` header (the
convention of Stripe, Adyen, PayPal and the IETF draft of that name) and retries
with the **same** key when the outcome is unknown or the server asks for a retry:
a connection refused, reset or dropped, a timeout, a 5xx, 408, 425, 429, or 409
(which the draft answers while a request with the same key is still in flight).
A server that honours the header applies the effect once and replays its first
answer to every repeat; that is what makes the retry, and a resumed step's second
call, safe.

Only the standard library is used (``urllib``). Redirects are not followed: urllib
would turn a redirected POST into a GET and send the effect elsewhere; a 3xx comes
back as :class:`HttpStatusError` like any other answer that is not 2xx.

What this cannot do alone: tell whether an effect happened when the server does
not dedupe by the header. Then the probe needs a read-back (``readback.read_back``)
against an endpoint that shows the effect, and a retry may apply it twice.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from skillstate.errors import SkillstateError, UsageError

__all__ = [
    "RETRY_STATUSES",
    "HttpError",
    "HttpResult",
    "HttpStatusError",
    "HttpTransportError",
    "idempotent_request",
]

RETRY_STATUSES = frozenset({408, 409, 425, 429})
"""Statuses below 500 that are retried with the same key (every 5xx is retried)."""


class HttpError(SkillstateError):
    """An idempotent request did not get a 2xx answer, after every retry it was allowed."""

    def __init__(self, message: str, *, method: str, url: str, key: str, attempts: int) -> None:
        super().__init__(message)
        self.method = method
        self.url = url
        self.key = key
        self.attempts = attempts


class HttpStatusError(HttpError):
    """The server answered with a status that is not 2xx (a 4xx at once, a 5xx at last)."""

    def __init__(
        self,
        *,
        method: str,
        url: str,
        key: str,
        attempts: int,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
    ) -> None:
        snippet = body[:200].decode("utf-8", errors="replace")
        super().__init__(
            f"{method} {url} (Idempotency-Key {key}) answered {status} after "
            f"{attempts} attempt(s): {snippet}",
            method=method,
            url=url,
            key=key,
            attempts=attempts,
        )
        self.status = status
        self.headers = headers
        self.body = body


class HttpTransportError(HttpError):
    """No answer came back (refused, reset, dropped, timed out) on any attempt.

    The effect may or may not have happened: the same key makes a later call safe.
    The last low-level error is attached as ``__cause__``.
    """


@dataclass(frozen=True)
class HttpResult:
    """A 2xx answer: status, headers (lower-case names), body, and how many attempts it took."""

    status: int
    headers: Mapping[str, str] = field(repr=False)
    body: bytes = field(repr=False)
    key: str = ""
    attempts: int = 1

    def json(self) -> Any:
        """The body decoded as JSON (``ValueError`` if it is not)."""
        return jsonlib.loads(self.body)


def idempotent_request(
    method: str,
    url: str,
    key: str,
    *,
    json: Any = None,
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    retries: int = 2,
    backoff: float = 0.2,
) -> HttpResult:
    """Send one request with ``Idempotency-Key: key``; retry when the outcome is unknown.

    ``json`` (encoded, with ``Content-Type: application/json``) or ``data`` (raw bytes)
    is the body. Up to ``retries`` more attempts follow a transport error or a
    retryable status, ``backoff * 2**n`` seconds apart, every one with the same key
    and body. Returns the first 2xx answer; raises :class:`HttpStatusError` for an
    answer that is not 2xx and not retried (or still failing at the end), and
    :class:`HttpTransportError` when no attempt got an answer.
    """
    method = method.upper()
    request = _build(method, url, key, json=json, data=data, headers=headers)
    if retries < 0 or backoff < 0 or timeout <= 0:
        raise UsageError("retries and backoff must be >= 0, timeout > 0")
    opener = urllib.request.build_opener(_NoRedirects())
    attempts = retries + 1
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            time.sleep(backoff * 2 ** (attempt - 2))
        try:
            status, answer, body = _send(opener, request, timeout)
        except (OSError, http.client.HTTPException) as exc:
            # URLError, timeouts, resets and a connection closed before the answer
            # all land here: the server may or may not have applied the effect.
            if attempt < attempts:
                continue
            raise HttpTransportError(
                f"{method} {url} (Idempotency-Key {key}) got no answer after {attempts} "
                f"attempt(s): {exc}",
                method=method,
                url=url,
                key=key,
                attempts=attempt,
            ) from exc
        if 200 <= status < 300:
            return HttpResult(status=status, headers=answer, body=body, key=key, attempts=attempt)
        if (status >= 500 or status in RETRY_STATUSES) and attempt < attempts:
            continue
        raise HttpStatusError(
            method=method,
            url=url,
            key=key,
            attempts=attempt,
            status=status,
            headers=answer,
            body=body,
        )
    raise AssertionError("unreachable: the last attempt returns or raises")


def _build(
    method: str,
    url: str,
    key: str,
    *,
    json: Any,
    data: bytes | None,
    headers: Mapping[str, str] | None,
) -> urllib.request.Request:
    if urlsplit(url).scheme not in ("http", "https"):
        raise UsageError(f"not an http(s) URL: {url!r}")
    if not isinstance(key, str) or not key or any(c in key for c in "\r\n"):
        raise UsageError(f"an idempotency key must be a non-empty one-line string: {key!r}")
    if json is not None and data is not None:
        raise UsageError("pass json= or data=, not both")
    sent = {name.title(): value for name, value in (headers or {}).items()}
    if sent.get("Idempotency-Key", key) != key:
        raise UsageError("headers already carry a different Idempotency-Key")
    sent["Idempotency-Key"] = key
    body = data
    if json is not None:
        body = jsonlib.dumps(json, separators=(",", ":")).encode()
        sent.setdefault("Content-Type", "application/json")
    return urllib.request.Request(url, data=body, headers=sent, method=method)


def _send(
    opener: urllib.request.OpenerDirector, request: urllib.request.Request, timeout: float
) -> tuple[int, dict[str, str], bytes]:
    """One attempt: status, headers and the whole body (an error status is an answer too)."""
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, _headers(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        if exc.fp is None:
            return exc.code, _headers(exc.headers), b""
        try:
            return exc.code, _headers(exc.headers), exc.read()
        finally:
            exc.close()  # the error holds the socket open until closed


def _headers(message: Any) -> dict[str, str]:
    # Lower-case names; a repeated header is joined with ", " as HTTP allows.
    joined: dict[str, str] = {}
    for name, value in message.items():
        lower = name.lower()
        joined[lower] = f"{joined[lower]}, {value}" if lower in joined else value
    return joined


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Hand a 3xx back as an answer instead of re-sending the effect somewhere else."""

    def redirect_request(  # noqa: PLR0917 (urllib fixes this signature)
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None
