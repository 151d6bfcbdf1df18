"""A local OpenAI-compatible ``/v1/embeddings`` server for the embeddings retriever's tests.

Its vectors are hashed bags of words (:func:`skillstate.library.retrieval.words`
into :data:`DIMENSIONS` buckets): texts that share words are close, which is all a
contract test needs, with no model and no network.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from skillstate.library.retrieval import words

DIMENSIONS = 256


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in words(text):
        bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIMENSIONS
        vector[bucket] += 1.0
    vector[0] += 1e-3  # never all zeros: a text with no word still has a direction
    return vector


@dataclass
class FakeEmbeddings:
    """Answers embeddings requests; records each request's body and headers."""

    port: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    fail_with: tuple[int, str] | None = None
    """``(status, message)``: answer every request with this error instead."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _handler(fake: FakeEmbeddings) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            fake.requests.append(body)
            fake.headers.append({k.lower(): v for k, v in self.headers.items()})
            if fake.fail_with is not None:
                status, message = fake.fail_with
                reply: dict[str, Any] = {"error": {"message": message, "type": "server_error"}}
            elif self.path != "/v1/embeddings":
                status, reply = 404, {"error": {"message": f"no route {self.path}"}}
            else:
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = [
                    {"object": "embedding", "index": i, "embedding": embed(text)}
                    for i, text in enumerate(inputs)
                ]
                data.reverse()  # the SDK's order is by index, not by position: check it
                status = 200
                reply = {
                    "object": "list",
                    "data": data,
                    "model": body.get("model"),
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
            out = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler


@contextmanager
def serving() -> Iterator[FakeEmbeddings]:
    fake = FakeEmbeddings()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
