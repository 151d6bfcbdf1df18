"""Named inspector tokens: who may read, who may write, and whose name a write records.

Without named tokens the inspector behaves as it always did: every page is open to
whoever reaches it, and writes need ``--allow-edit`` and the one token it printed.
With named tokens (``skillstate ui --token-file tokens.toml``, or
``$SKILLSTATE_UI_TOKENS``), each token has a name and a right::

    # tokens.toml
    alice = { sha256 = "9f86d08...", rights = "write" }   # the token's SHA-256, hex
    dashboard = { token = "a-long-random-string", rights = "read" }

and then:

* every request but the login page and static files needs a read or write token,
  from ``X-Skillstate-Token``, ``Authorization: Bearer`` or the cookie the login page
  sets (else 401: an API call gets a JSON error, a page the login form);
* a write needs a *write* token in a header or its form's ``token`` field (a read
  token: 403; none or an unknown one: 401), and the token's **name** becomes the
  ``by`` of the commit it makes (:mod:`skillstate.audit`);
* writes are accepted whenever a write token is configured (``--allow-edit`` is
  implied; the single printed token is not made).

Tokens are compared by their SHA-256 digests in constant time (``hmac.compare_digest``,
against every configured token, so the time does not say which one nearly matched).
A plaintext ``token`` in the file is hashed when read and never kept, logged or
stored; only its name reaches an event.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from skillstate.audit import check_by
from skillstate.errors import UsageError

__all__ = [
    "COOKIE",
    "TOKENS_ENV",
    "NamedToken",
    "Right",
    "load_tokens",
    "match",
    "parse_tokens",
]

TOKENS_ENV = "SKILLSTATE_UI_TOKENS"
"""A tokens file's path, or its TOML text (see the module doc)."""
COOKIE = "skillstate_token"
"""The cookie the login page sets: the browser's read token (HttpOnly, SameSite=Strict)."""
MIN_TOKEN = 16
"""The shortest plaintext token accepted in a tokens file."""
Right = Literal["read", "write"]
RIGHTS: tuple[Right, ...] = ("read", "write")


@dataclass(frozen=True)
class NamedToken:
    """One configured token: its name, its SHA-256 digest, its right."""

    name: str
    digest: bytes
    rights: Right

    def __repr__(self) -> str:  # never the digest: it is as good as a password hash
        return f"NamedToken({self.name!r}, rights={self.rights!r})"

    @property
    def can_write(self) -> bool:
        return self.rights == "write"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _entry(name: str, value: Any, where: str) -> NamedToken:
    who = check_by(str(name), what=f"token name in {where}")
    if not isinstance(value, Mapping):
        raise UsageError(
            f"token {who!r} in {where} must be a table: {{ sha256 = ..., rights = ... }}"
        )
    unknown = sorted(set(value) - {"sha256", "token", "rights"})
    if unknown:
        raise UsageError(f"token {who!r} in {where}: unknown key {unknown[0]!r}")
    rights = value.get("rights")
    if rights not in RIGHTS:
        raise UsageError(f'token {who!r} in {where}: rights must be "read" or "write"')
    hashed, plain = value.get("sha256"), value.get("token")
    if (hashed is None) == (plain is None):
        raise UsageError(f"token {who!r} in {where}: give one of sha256 and token")
    if plain is not None:
        if not isinstance(plain, str) or len(plain) < MIN_TOKEN or not plain.isprintable():
            raise UsageError(
                f"token {who!r} in {where}: a token is at least {MIN_TOKEN} printable characters"
            )
        return NamedToken(who, _digest(plain), rights)
    try:
        raw = bytes.fromhex(hashed) if isinstance(hashed, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != hashlib.sha256().digest_size:
        raise UsageError(f"token {who!r} in {where}: sha256 must be 64 hex digits")
    return NamedToken(who, raw, rights)


def parse_tokens(text: str, where: str) -> tuple[NamedToken, ...]:
    """The named tokens a TOML text declares (top level, or under ``[tokens]``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where} is not valid TOML: {exc}") from None
    table = data.get("tokens", data) if isinstance(data.get("tokens"), dict) else data
    tokens = tuple(_entry(name, value, where) for name, value in table.items())
    if not tokens:
        raise UsageError(f"{where} names no token")
    digests = [t.digest for t in tokens]
    if len(set(digests)) != len(digests):
        raise UsageError(f"{where}: two names share one token")
    return tokens


def load_tokens(path: Path | None = None) -> tuple[NamedToken, ...]:
    """The tokens of ``path`` (``--token-file``), else of ``$SKILLSTATE_UI_TOKENS`` (a
    path, or the TOML text itself); ``()`` when neither is given."""
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            raise UsageError(
                f"cannot read --token-file {str(path)!r}: {exc.__class__.__name__}"
            ) from None
        return parse_tokens(text, f"--token-file {path.name!r}")
    given = os.environ.get(TOKENS_ENV, "").strip()
    if not given:
        return ()
    if "=" in given:
        return parse_tokens(given, f"${TOKENS_ENV}")
    return load_tokens(Path(given))


def match(tokens: tuple[NamedToken, ...], given: str | None) -> NamedToken | None:
    """The token ``given`` is, compared in constant time against every one; else ``None``."""
    if not given:
        return None
    digest = _digest(given)
    found = None
    for token in tokens:  # no early exit: the time does not depend on which one matched
        if hmac.compare_digest(digest, token.digest):
            found = token
    return found


# ---------------------------------------------------------------------- the read gate

Call = Callable[[Any, Any, Any], Awaitable[None]]
OPEN_PATHS = ("/login", "/static/")
"""What needs no token: the login page, and the stylesheet and scripts it uses."""


class ReadGate:
    """ASGI middleware: with named tokens, every request needs a read or write token."""

    def __init__(self, app: Call, tokens: tuple[NamedToken, ...]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.tokens or _open(scope["path"]):
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request

        request = Request(scope)
        given = _header_token(request) or request.cookies.get(COOKIE)
        if match(self.tokens, given) is None:
            response = _refused(request)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _open(path: str) -> bool:
    return path == "/login" or path.startswith("/static/")


def _header_token(request: Any) -> str | None:
    from skillstate.ui.actions import header_token

    return header_token(request)


NEEDS_TOKEN = "this inspector needs a token: send it as X-Skillstate-Token, or log in at /login"


def _refused(request: Any) -> Any:
    from starlette.responses import HTMLResponse, JSONResponse

    if request.url.path.startswith("/api/") or request.url.path == "/metrics":
        return JSONResponse({"error": NEEDS_TOKEN, "kind": "TokenRequired"}, status_code=401)
    return HTMLResponse(_LOGIN_PAGE.format(message=NEEDS_TOKEN), status_code=401)


_LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>skillstate · log in</title>
<link rel="stylesheet" href="/static/app.css"></head><body><main>
<h1>skillstate inspector</h1><p>{message}</p>
<form method="post" action="/login"><label>token <input type="password" name="token"
autocomplete="current-password" required></label> <button type="submit">log in</button></form>
</main></body></html>"""


async def login(request: Any) -> Any:
    """``GET /login``: the form; ``POST /login``: a known token becomes the cookie."""
    from starlette.responses import HTMLResponse, RedirectResponse

    from skillstate.ui import body

    ui = request.app.state.ui
    if request.method == "GET":
        return HTMLResponse(_LOGIN_PAGE.format(message="Log in with your inspector token."))
    fields = body.form_fields(await body.read_body(request, ui.config.max_body))
    token = fields.get("token") or ""
    if match(ui.config.tokens, token) is None:
        return HTMLResponse(_LOGIN_PAGE.format(message="unknown token"), status_code=401)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def routes() -> list[Any]:
    """The login page (served only when named tokens are configured)."""
    from starlette.routing import Route

    return [Route("/login", login, methods=["GET", "POST"])]
