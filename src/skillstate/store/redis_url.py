"""Redis store URLs: taken apart, checked, and shown with the password masked.

``redis://[[user]:password@]host[:port][/db][?prefix=NAME&OPTION=VALUE...]``
(``rediss://`` for TLS). ``prefix`` is the store's; every other option goes to
redis-py as written, if it is one of the plain options redis-py reads from a URL
*and* the connection class in use (``Connection``, or ``SSLConnection`` for TLS)
takes it. Anything else is ``InvalidStoreURL`` naming it: redis-py itself would
pass an unknown option on and fail with a ``TypeError`` at the first connection.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from skillstate.errors import InvalidStoreURL

__all__ = ["DEFAULT_PREFIX", "glob_escape", "mask", "parse_url"]

DEFAULT_PREFIX = "skillstate"

_OPTIONS = frozenset(
    {
        "db",
        "username",
        "password",
        "client_name",
        "lib_name",
        "lib_version",
        "protocol",
        "max_connections",
        "health_check_interval",
        "retry_on_timeout",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_read_size",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_password",
        "ssl_ciphers",
        "ssl_min_version",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
        "ssl_validate_ocsp",
        "ssl_validate_ocsp_stapled",
    }
)
"""URL options the store passes on: plain values redis-py reads from a URL. Left out
on purpose: ones that change how values are encoded (``decode_responses``,
``encoding``), which the store relies on being bytes in UTF-8."""


def _url_options(module: ModuleType, tls: bool) -> set[str]:
    """The options of :data:`_OPTIONS` this redis-py's connection class really takes."""
    connection = module.connection
    classes = [connection.SSLConnection] if tls else [connection.Connection]
    taken = {"max_connections", "db"}
    for cls in classes:
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is not None:
                taken |= set(inspect.signature(init).parameters)
    return set(_OPTIONS) & taken


def parse_url(url: str, module: ModuleType | None = None) -> tuple[str, str, str]:
    """``(URL for redis-py, key prefix, URL with the password masked)``.

    ``module`` is redis-py, to check the options against; it is imported only when
    the URL has options to check (``None``: import it then).
    """
    parts = urlsplit(url)
    masked = mask(url)
    if parts.scheme not in {"redis", "rediss"}:
        raise InvalidStoreURL(f"not a Redis URL: {masked!r} (expected redis:// or rediss://)")
    if not parts.hostname:
        raise InvalidStoreURL(f"Redis URL {masked!r} names no host (try redis://localhost:6379/0)")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked for it
    except ValueError as exc:
        raise InvalidStoreURL(f"Redis URL {masked!r} has a bad port ({exc})") from exc
    db = parts.path.strip("/")
    if db and not db.isdigit():
        # redis-py would quietly fall back to database 0: say so instead.
        raise InvalidStoreURL(f"Redis URL {masked!r}: the path must be a database number")
    prefix = DEFAULT_PREFIX
    kept: list[str] = []
    unknown: list[str] = []
    # Split by hand rather than parse and re-encode: redis-py must see its own
    # parameters exactly as written.
    for item in parts.query.split("&"):
        name = unquote(item.partition("=")[0])
        if name != "prefix":
            if item:
                kept.append(item)
                unknown.append(name)
            continue
        prefix = parse_qsl(item, keep_blank_values=True)[0][1]
        if not prefix:
            raise InvalidStoreURL(f"Redis URL {masked!r} has an empty prefix")
    if unknown:
        if module is None:
            from skillstate.store.redis import _redis

            module = _redis()
        known = _url_options(module, parts.scheme == "rediss")
        unknown = [name for name in unknown if name not in known]
    if unknown:
        raise InvalidStoreURL(
            f"unknown Redis URL option(s) in {masked!r}: {', '.join(sorted(set(unknown)))}"
        )
    client_url = urlunsplit(parts._replace(query="&".join(kept)))
    return client_url, prefix, masked


def mask(url: str) -> str:
    """The URL with any password replaced by ``***`` (user names stay: they help debugging)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def glob_escape(text: str) -> str:
    """``text`` matched literally by a SCAN ``MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
