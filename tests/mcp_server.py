"""A real MCP server for tests/test_mcp_tools.py, written with the official SDK.

    python tests/mcp_server.py stdio     serve over stdin/stdout
    python tests/mcp_server.py http      serve streamable HTTP on 127.0.0.1, a free port;
                                         prints ``LISTENING <port>`` once it accepts

Over HTTP every request must carry ``Authorization: Bearer $MCP_TEST_TOKEN`` (401
otherwise). ``whoami`` echoes the credential it was given (the env var over stdio,
the header over HTTP), to show that skillstate masks it when a server sends it back.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Any, TypedDict

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("skillstate-test", log_level="WARNING")

CITIES = {"Lisbon": (18.5, "sunny"), "Oslo": (-3.0, "snow")}


class Forecast(TypedDict):
    city: str
    celsius: float
    sky: str


@server.tool()
def forecast(city: str) -> Forecast:
    """Today's weather in a city (structured: declares an output schema)."""
    if city not in CITIES:
        raise ToolError(f"no forecast for {city!r}")
    celsius, sky = CITIES[city]
    return {"city": city, "celsius": celsius, "sky": sky}


@server.tool(structured_output=False)
def shout(text: str, times: int = 1) -> str:
    """The text in capitals, repeated (unstructured: text content only)."""
    return " ".join([text.upper()] * times)


@server.tool(structured_output=False)
def fail(reason: str) -> str:
    """Always fails with the reason (an isError result)."""
    raise ToolError(reason)


@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Answers after ``seconds``."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(structured_output=False)
def whoami(ctx: Context) -> str:
    """The credential this server was given, echoed back (a careless server)."""
    headers = ctx.headers or {}
    given = headers.get("authorization") or os.environ.get("MCP_TEST_TOKEN", "")
    return f"pid={os.getpid()} credential={given}"


class RequireToken:
    """ASGI middleware: 401 unless the request carries the expected bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != (
            self.expected
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


def serve_http() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = RequireToken(server.streamable_http_app(host="127.0.0.1"), os.environ["MCP_TEST_TOKEN"])

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            print(f"LISTENING {port}", flush=True)  # only once uvicorn accepts connections

    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    Announcing(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        serve_http()
    else:
        server.run("stdio")
