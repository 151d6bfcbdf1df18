"""Hostile requests against the whole inspector (issue 24): 0 HTTP 5xx, 0 exceptions.

Hypothesis draws a few thousand requests (derandomized, so a run is reproducible):
no token, a wrong one or the right one; bodies of bad JSON, deep nesting, lone
surrogates, huge integers, NaN, wrong types, non-UTF-8 bytes, bodies over the bound;
garbage query strings; path traversal and odd bytes in task ids, refs and numbers;
unknown methods. The app runs in process with ``raise_server_exceptions=False``:
every answer must be below 500, and the log (where a 500 would write its traceback)
and stderr must stay free of tracebacks.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.ui_support import KEY_ENV, DemoStore, copy_store, demo_store

TOKEN = "fuzz-token-0b5e2a"
EXAMPLES = 2500
"""Requests drawn (about 25 s on a busy 2-core machine)."""

IDS = ["t1", "t2", "o1", "nope", "", ".", "..", "..%2f..%2fetc%2fpasswd", "%2e%2e%2f%2e%2e",
       "../../etc/passwd", "t1%00", "%00", "%ff%fe", "%ed%a0%80", "a" * 300, "t1/../t2",
       "%0d%0aSet-Cookie:x=1", "<script>alert(1)</script>", "t1%2f..%2f..", "~", "%25"]  # fmt: skip
NUMBERS = ["1", "4", "10", "0", "-1", "999999999999999999999999", "9" * 5000, "1e9", "x",
           "", "%00", "4.5", "0x10", "+3", "٣"]  # fmt: skip
REFS = ["sha256:" + "0" * 64, "sha256:nothex", "..%2f..%2fstate.db", "sha256:" + "a" * 64 + "%00",
        "%2e%2e", "x" * 400]  # fmt: skip
RUNS = ["task-history-1", "..", "..%2f..", "%00", "x" * 300]
ACTIONS = ["reply", "rollback", "fork", "set", "nope", "..%2fset", ""]
TEMPLATES = [
    "/", "/api/tasks", "/reports", "/api/reports", "/tasks/{id}", "/api/tasks/{id}",
    "/api/head/{id}", "/api/tokens/{id}", "/chart/{id}", "/steps/{n}/{id}",
    "/api/steps/{n}/{id}", "/versions/{n}/{id}", "/api/versions/{n}/{id}",
    "/artifacts/{ref}/{id}", "/api/artifacts/{ref}/{id}", "/actions/{action}/{id}",
    "/api/actions/{action}/{id}", "/reports/{n}", "/api/reports/{n}",
    "/reports/{n}/plots/{id}", "/r/{n}/{run}/tasks/{id}", "/api/r/{n}/{run}/tasks/{id}",
    "/static/{id}", "/{id}",
]  # fmt: skip
QUERY_KEYS = ["page", "size", "sort", "status", "agent", "q", "expect", "notice", "n", "page[]"]
HOSTILE_TEXT = ["", "-1", "0", "9" * 5000, "NaN", "%00", "%ff", "%ed%a0%80", "../../etc/passwd",
                "/etc/passwd", "a.json", "x" * 3000, "<b>hi</b>", "id", "updated", "completed",
                "%0a%0d", "1e400", "[]", "{}"]  # fmt: skip
BODIES = [
    b"", b" ", b"null", b"[]", b"42", b'"x"', b"{", b"\xff\xfe\x00", b"\xc3\x28",
    b"[" * 20_000 + b"]" * 20_000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
    b'{"text": "\\ud800"}', b'{"assignments": "x=\\udfff"}', b'{"to": ' + b"9" * 5000 + b"}",
    b'{"to": ' + b"9" * 4000 + b"}", b'{"to": NaN}', b'{"at": Infinity, "new_id": "f"}',
    b'{"to": 1e400}', b'{"text": "' + b"a" * 70_000 + b'"}', b"x=1&y=2&token=" + TOKEN.encode(),
    b"token=" + TOKEN.encode() + b"&assignments=resolution%3D%00",
    b"token=" + TOKEN.encode() + b"&assignments=%ff%fe", b"a=" + b"%25" * 30_000,
    b'{"assignments": "resolution=\\u0000"}', b'{"assignments": ["facts.a=&x [1]", "b=*x"]}',
    b'{"assignments": "facts.x=' + b"[" * 100 + b"]" * 100 + b'"}',
]  # fmt: skip
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
PLAUSIBLE: dict[str, list[dict[str, Any]]] = {
    "reply": [{"text": "The VPN drops"}, {"text": "It's P1"}],
    "rollback": [{"to": 2}, {"to": "3", "effects": "keep"}, {"to": 1, "effects": "compensate"}],
    "fork": [{"at": 2, "new_id": "fork-x"}, {"at": 1, "new_id": "fork-y", "effects": "keep"}],
    "set": [{"assignments": "resolution=by hand"}, {"assignments": "api_token=tok-x"},
            {"assignments": ["priority=P2", "status=failed"], "force": True}],
}  # fmt: skip
FIELDS = ["text", "to", "at", "new_id", "effects", "assignments", "force", "token", "x"]
VALUES = ["resolution=by hand", "facts.sla_hours=8", "priority=P2\nresolution=x", "status=failed",
          "api_token=tok-new", "agent=os:abort", "4", "2", "refuse", "keep", "compensate", "fork-1",
          "The VPN drops", "x\u202ey", "a\x00b", "resolution=\x1b[2J", 'resolution="\\a"',
          ["resolution=listed"], ["facts={a: 1}", "priority=P3"], True, "1", "on", 10**15, -1,
          "resolution=&a [1]", "resolution=*a", "facts.x=" + "[" * 40 + "]" * 40]  # fmt: skip


@pytest.fixture(scope="module")
def app_and_log(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestClient, list[logging.LogRecord]]]:
    from skillstate.ui import UIConfig, create_app

    root = tmp_path_factory.mktemp("ui-fuzz")
    demo: DemoStore = demo_store(root / "demo")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, demo.env[KEY_ENV])
        patch.chdir(root)
        url = copy_store(demo.root / "state.db", root)
        config = UIConfig(store_url=url, hosts=(), allow_edit=True, token=TOKEN, max_steps=3)
        records: list[logging.LogRecord] = []
        handler = _Collect(records)
        logging.getLogger().addHandler(handler)
        try:
            with TestClient(create_app(config), raise_server_exceptions=False) as client:
                yield client, records
        finally:
            logging.getLogger().removeHandler(handler)


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


def _free() -> st.SearchStrategy[str]:
    return st.text(max_size=20).map(lambda t: quote(t, safe=""))


@st.composite
def _headers(draw: st.DrawFn, content_type: str) -> dict[str, str]:
    """The token (mostly the right one, so the body is read) and a media type."""
    headers: dict[str, str] = {}
    token = draw(st.sampled_from([TOKEN] * 6 + [None, "wrong", "", "x" * 500]))
    if token is not None:
        if draw(st.booleans()):
            headers["X-Skillstate-Token"] = token
        else:
            headers["Authorization"] = f"Bearer {token}"
    kind = draw(
        st.sampled_from(
            [content_type] * 8
            + [None, "text/plain", "multipart/form-data; boundary=x",
               "application/json; charset=latin-1", "application/x-www-form-urlencoded",
               "application/json"]
        )
    )  # fmt: skip
    if kind:
        headers["Content-Type"] = kind
    return headers


@st.composite
def _write(draw: st.DrawFn) -> dict[str, Any]:
    """A write: an action on a task, with a JSON, form or hostile body."""
    form = draw(st.booleans())
    action = draw(st.sampled_from(["reply", "rollback", "fork", "set"] * 5 + ACTIONS))
    task = draw(st.sampled_from(["t1", "t2", "o1"] * 8 + IDS))
    path = f"/{'' if form else 'api/'}actions/{action}/{task}"
    headers = draw(_headers("application/x-www-form-urlencoded" if form else "application/json"))
    fields = st.sampled_from(PLAUSIBLE.get(action, [{}])) | st.dictionaries(
        st.sampled_from(FIELDS), JSON_VALUES | st.sampled_from(VALUES), max_size=4
    )
    if form:
        pairs = fields.map(lambda d: {k: str(v) for k, v in d.items()})
        body = draw(
            pairs.map(lambda d: urlencode({**d, "token": TOKEN}).encode())
            | st.sampled_from(BODIES)
            | st.binary(max_size=200)
        )
    else:
        body = draw(fields.map(_json) | st.sampled_from(BODIES) | st.binary(max_size=200))
    method = draw(st.sampled_from(["POST"] * 12 + ["GET", "PUT", "BREW"]))
    return {"method": method, "path": path, "query": {}, "headers": headers, "body": body}


@st.composite
def _read(draw: st.DrawFn) -> dict[str, Any]:
    """A page or an API read, with odd ids, numbers, refs and query strings."""
    path = draw(st.sampled_from(TEMPLATES)).format(
        id=draw(st.sampled_from(IDS) | _free()),
        n=draw(st.sampled_from(NUMBERS)),
        ref=draw(st.sampled_from(REFS) | _free()),
        action=draw(st.sampled_from(ACTIONS)),
        run=draw(st.sampled_from(RUNS)),
    )
    query = draw(
        st.dictionaries(
            st.sampled_from(QUERY_KEYS), st.sampled_from(HOSTILE_TEXT) | _free(), max_size=3
        )
    )
    method = draw(st.sampled_from(["GET"] * 8 + ["POST", "HEAD", "OPTIONS", "DELETE", "PROPFIND"]))
    body = draw(st.sampled_from(BODIES)) if method == "POST" else None
    return {"method": method, "path": path, "query": query, "headers": {}, "body": body}


requests = st.one_of(_read(), _write())


def _json(value: object) -> bytes:
    import json

    return json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


STATUSES: Counter[int] = Counter()
WRITES: Counter[int] = Counter()
FAILURES: list[str] = []


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(request=requests)
def _fuzz_one(client: TestClient, request: dict[str, Any]) -> None:
    query = "&".join(f"{k}={v}" for k, v in request["query"].items())
    url = request["path"] + (f"?{query}" if query else "")
    response = client.request(
        request["method"], url, content=request["body"], headers=request["headers"]
    )
    STATUSES[response.status_code] += 1
    if "actions/" in request["path"]:
        WRITES[response.status_code] += 1
    if response.status_code >= 500:
        FAILURES.append(f"{request['method']} {url[:120]} -> {response.status_code}")


def test_hostile_requests_never_get_a_5xx(
    app_and_log: tuple[TestClient, list[logging.LogRecord]],
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    client, records = app_and_log
    started = time.monotonic()
    _fuzz_one(client)
    spent = time.monotonic() - started
    _, err = capfd.readouterr()
    logged = [r.getMessage() for r in records if r.exc_info or "Traceback" in r.getMessage()]
    total = sum(STATUSES.values())
    print(f"{total} requests in {spent:.1f} s: {dict(sorted(STATUSES.items()))}")
    print(f"of which writes: {dict(sorted(WRITES.items()))}")
    assert total >= EXAMPLES
    assert FAILURES == [], FAILURES[:20]
    assert logged == [], logged[:5]
    assert "Traceback" not in err, err[-3000:]
