"""The client side: :class:`MCPServer` (one server's session) and :class:`MCPTool`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.metadata
import os
import sys
import threading
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar
from urllib.parse import urlsplit

from skillstate.errors import MissingExtra, UsageError
from skillstate.integrations.mcp._session import LIVE, Connection, Http, Stdio, secret_values
from skillstate.integrations.mcp.errors import (
    MCPCallError,
    MCPConnectionError,
    MCPProtocolError,
    MCPTimeout,
    MCPToolError,
    describe,
)
from skillstate.state.redact import Redactor

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult
    from mcp.types import Tool as ToolInfo

__all__ = ["CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "MCPServer", "MCPTool"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Seconds a tool call may take unless the server or the tool says otherwise."""
CONNECT_TIMEOUT = 30.0
"""Seconds to start a server (or reach it) and complete the MCP handshake."""
_GRACE = 5.0
"""How much longer than its timeout a caller waits for the loop to answer at all."""
_INSTALL = "MCP tools need the official SDK, version 2: pip install 'skillstate[mcp]'"


def _require_sdk() -> None:
    """Fail early, and by the extra's name, when the SDK is missing or too old."""
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        raise MissingExtra(_INSTALL) from None
    if int(version.split(".")[0]) < 2:
        raise MissingExtra(f"{_INSTALL} (found mcp {version})")


# ---------------------------------------------------------------- the server


class MCPServer:
    """An MCP server whose tools an agent may use. Build it with :meth:`stdio` or :meth:`http`.

    Nothing starts until the first call (or :meth:`start`, :meth:`tools`); one
    session then serves every call, from any thread, until :meth:`close`. A server
    is also a context manager (``with MCPServer.stdio(...) as server:``), and is
    usable again after it was closed (the next call reconnects).
    """

    def __init__(
        self,
        transport: Stdio | Http,
        *,
        name: str | None,
        timeout: float,
        connect_timeout: float,
        secrets: Iterable[str],
    ) -> None:
        _require_sdk()
        for label, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if not value > 0:
                raise UsageError(f"MCPServer {label} must be > 0 seconds, not {value!r}")
        self._transport = transport
        self.name = name or str(transport)
        """How errors and ``repr`` name the server (never with its credentials)."""
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._redactor = Redactor(secret_values(transport, secrets))
        self._lock = threading.Lock()
        self._conn: Connection | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr: TextIO | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        secrets: Iterable[str] = (),
    ) -> MCPServer:
        """A server run as a subprocess, spoken to over its stdin and stdout.

        Args:
            command: The executable (``"uvx"``, ``"npx"``, ``sys.executable``).
            args: Its arguments.
            env: Variables for the process, on top of the SDK's safe defaults
                (``PATH``, ``HOME``...; not this process's whole environment). Their
                values are treated as secrets: masked if the server sends one back.
            cwd: The process's working directory.
            stderr: Where the process's stderr goes (default: this process's).
            name: How errors name the server (default: the command line).
            timeout: Seconds each tool call may take (a tool can override it).
            connect_timeout: Seconds to start the process and complete the handshake.
            secrets: More values to mask in everything the server returns.
        """
        if isinstance(args, str):
            raise UsageError("MCPServer.stdio args is a sequence of arguments, not one string")
        spec = Stdio(command, tuple(args), dict(env or {}), _path(cwd), stderr)
        return cls(
            spec, name=name, timeout=timeout, connect_timeout=connect_timeout, secrets=secrets
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        secrets: Iterable[str] = (),
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url`` (e.g. ``http://host:8000/mcp``).

        Args:
            url: The MCP endpoint.
            headers: Sent with every request (``{"Authorization": "Bearer ..."}``). Their
                values are treated as secrets, as are a password or query values in the URL.
            name: How errors name the server (default: the URL without credentials).
            timeout: Seconds each tool call may take (a tool can override it).
            connect_timeout: Seconds to reach the server and complete the handshake.
            secrets: More values to mask in everything the server returns.
        """
        if urlsplit(url).scheme not in ("http", "https"):
            raise UsageError(f"MCPServer.http needs an http(s) URL, not {Http(url, {})}")
        spec = Http(url, dict(headers or {}))
        return cls(
            spec, name=name, timeout=timeout, connect_timeout=connect_timeout, secrets=secrets
        )

    def __repr__(self) -> str:
        kind = "stdio" if isinstance(self._transport, Stdio) else "http"
        return f"MCPServer.{kind}({str(self._transport)!r})"

    # ---- lifecycle

    @property
    def running(self) -> bool:
        """Whether a session is open now."""
        conn = self._conn
        return conn is not None and conn.usable

    def start(self) -> MCPServer:
        """Connect now (start the process, or reach the URL), not at the first call.

        Raises :class:`MCPConnectionError` or :class:`MCPTimeout` when that fails.
        """
        self._connection()
        return self

    def close(self) -> None:
        """End the session and stop a stdio server's process. Idempotent."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.shutdown()
        LIVE.discard(self)

    async def aclose(self) -> None:
        """:meth:`close` without blocking the caller's event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> MCPServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPServer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _connection(self) -> Connection:
        with self._lock:
            conn = self._conn
            if conn is not None and conn.usable:
                return conn
            if conn is not None:  # broken: drop it, connect again
                self._conn = None
                conn.shutdown()
            conn = Connection(self)
            conn.start(self.connect_timeout)
            self._conn = conn
            LIVE.add(self)
            return conn

    async def _open(self, stack: contextlib.AsyncExitStack, conn: Connection) -> Client:
        """Enter the SDK's client for this transport (runs on the session's loop)."""
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        spec = self._transport
        if isinstance(spec, Stdio):
            params = StdioServerParameters(
                command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=spec.cwd
            )
            client = Client(stdio_client(params, errlog=spec.stderr or sys.stderr))
        else:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async def note(response: httpx2.Response) -> None:
                if response.status_code >= 400:
                    conn.http_status = response.status_code

            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(spec.headers),
                    # The SDK's own defaults: a response stream may stay open a while.
                    timeout=httpx2.Timeout(self.connect_timeout, read=300.0),
                    event_hooks={"response": [note]},
                )
            )
            client = Client(streamable_http_client(spec.url, http_client=http))
        return await stack.enter_async_context(client)

    # ---- tools

    def tool(self, name: str, *, timeout: float | None = None, raw: bool = False) -> MCPTool:
        """The server's tool ``name`` as a callable (connects at its first call).

        Args:
            name: The tool's name on the server.
            timeout: Seconds a call may take (default: the server's ``timeout``).
            raw: Return (and store as the artifact) the whole MCP result as JSON
                (``content`` blocks, ``structuredContent``, ``_meta``) instead of its value.
        """
        return MCPTool(self, name, timeout=timeout, raw=raw)

    def tools(
        self, *names: str, prefix: str = "", timeout: float | None = None, raw: bool = False
    ) -> dict[str, MCPTool]:
        """The server's tools by name, ready for ``Agent(tools=...)``; connects to list them.

        Args:
            names: Only these tools (default: every tool the server lists).
            prefix: Prepended to each key (``"gh_"``), to keep two servers' names apart.
            timeout: Seconds a call may take (default: the server's ``timeout``).
            raw: As for :meth:`tool`.
        """
        listed = {info.name: info for info in self.list_tools()}
        unknown = sorted(set(names) - set(listed))
        if unknown:
            raise UsageError(
                f"MCP server {self.name} has no tool {', '.join(map(repr, unknown))}; "
                f"it lists: {', '.join(sorted(listed)) or 'none'}"
            )
        return {
            prefix + name: MCPTool(self, name, timeout=timeout, raw=raw, info=listed[name])
            for name in (names or tuple(listed))
        }

    def list_tools(self) -> list[ToolInfo]:
        """The tools the server lists (the SDK's ``Tool``: name, description, schemas)."""
        conn = self._connection()
        return self._wait(conn.submit(self._list(conn)), self.timeout, None)

    async def _list(self, conn: Connection) -> list[ToolInfo]:
        client = self._client(conn)
        found: list[ToolInfo] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang us
            page = await self._guard(conn, None, self.timeout, client.list_tools(cursor=cursor))
            found += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    def _client(self, conn: Connection) -> Client:
        if conn.client is None:
            raise MCPConnectionError(
                f"the connection to MCP server {self.name} is closed", server=self.name
            )
        return conn.client

    # ---- calls

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        raw: bool = False,
    ) -> Any:
        """Call ``tool`` and wait for its value (from any thread but the session's own).

        What :class:`MCPTool` does; ``timeout`` defaults to the server's.
        """
        timeout = timeout or self.timeout
        conn = self._connection()
        if threading.current_thread() is conn.thread:
            raise UsageError(f"MCP tool {tool!r} called synchronously from its own event loop")
        call = self._invoke(conn, tool, arguments or {}, timeout, raw)
        return self._wait(conn.submit(call), timeout, tool)

    async def acall(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        raw: bool = False,
    ) -> Any:
        """:meth:`call` from any event loop, without blocking it."""
        timeout = timeout or self.timeout
        conn = self._conn
        if conn is None or not conn.usable:
            conn = await asyncio.to_thread(self._connection)
        future = conn.submit(self._invoke(conn, tool, arguments or {}, timeout, raw))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout + _GRACE)
        except MCPCallError:
            raise
        except asyncio.TimeoutError:
            raise self._timeout(tool, timeout) from None

    def _wait(self, future: concurrent.futures.Future[T], timeout: float, tool: str | None) -> T:
        try:
            return future.result(timeout + _GRACE)
        except MCPCallError:
            raise
        except concurrent.futures.TimeoutError:  # the loop itself did not answer
            future.cancel()
            raise self._timeout(tool, timeout) from None

    async def _invoke(
        self, conn: Connection, tool: str, arguments: Mapping[str, Any], timeout: float, raw: bool
    ) -> Any:
        client = self._client(conn)
        call = client.call_tool(tool, dict(arguments), read_timeout_seconds=timeout)
        return self._result(tool, await self._guard(conn, tool, timeout, call), raw)

    async def _guard(
        self, conn: Connection, tool: str | None, timeout: float, call: Awaitable[T]
    ) -> T:
        """Await ``call`` within ``timeout``, the SDK's errors turned into this module's."""
        import anyio
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        what = f"MCP tool {tool!r} on {self.name}" if tool else f"MCP server {self.name}"
        try:
            with anyio.fail_after(timeout):
                return await call
        except TimeoutError:
            raise self._timeout(tool, timeout) from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise self._timeout(tool, timeout) from None
            message = self.scrub(f"{what} failed: {exc.message}")
            if exc.code == CONNECTION_CLOSED:
                conn.broken = True
                raise MCPConnectionError(message, server=self.name, tool=tool) from None
            raise MCPProtocolError(message, server=self.name, tool=tool, code=exc.code) from None
        except Exception as exc:  # a transport failure: the stream, the process, the socket
            conn.broken = True
            message = self.scrub(f"{what} failed: {describe(exc)}")
            raise MCPConnectionError(message, server=self.name, tool=tool) from None

    def _timeout(self, tool: str | None, timeout: float) -> MCPTimeout:
        what = f"MCP tool {tool!r} on {self.name}" if tool else f"MCP server {self.name}"
        return MCPTimeout(f"{what} timed out after {timeout:g}s", server=self.name, tool=tool)

    def _result(self, tool: str, result: CallToolResult, raw: bool) -> Any:
        """What a skill gets back: structured content, else the content's text (masked)."""
        from mcp.types import TextContent

        blocks = [
            b.text
            if isinstance(b, TextContent)
            else b.model_dump(mode="json", by_alias=True, exclude_none=True)
            for b in result.content
        ]
        if result.is_error:
            text = (
                "\n".join(b for b in blocks if isinstance(b, str)) or "the tool reported an error"
            )
            raise MCPToolError(self.scrub(text), server=self.name, tool=tool)
        value: Any
        if raw:
            value = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        elif result.structured_content is not None:
            value = result.structured_content
        else:
            value = None if not blocks else blocks[0] if len(blocks) == 1 else blocks
        return self._redactor.json(value)

    def scrub(self, text: str) -> str:
        """``text`` with every credential this server was given masked."""
        return self._redactor.text(text)


def _path(cwd: str | os.PathLike[str] | None) -> str | None:
    return None if cwd is None else str(Path(cwd))


class MCPTool:
    """One tool of an :class:`MCPServer`, as a plain callable: keyword arguments in, value out.

    ``tool(**arguments)`` blocks until the result (or :class:`MCPToolError`,
    :class:`MCPTimeout`, ...); ``await tool.acall(**arguments)`` is the same from
    async code, and ``tool.acall`` itself is the async variant to hand an async
    runtime. ``description``, ``input_schema`` and ``output_schema`` are known when
    the tool came from :meth:`MCPServer.tools` (``None`` otherwise).
    """

    def __init__(
        self,
        server: MCPServer,
        name: str,
        *,
        timeout: float | None = None,
        raw: bool = False,
        info: ToolInfo | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise UsageError(f"MCP tool {name!r}: timeout must be > 0 seconds, not {timeout!r}")
        self.server = server
        self.name = self.__name__ = name
        self.timeout = timeout if timeout is not None else server.timeout
        self.raw = raw
        self.description: str | None = info.description if info else None
        self.input_schema: dict[str, Any] | None = info.input_schema if info else None
        self.output_schema: dict[str, Any] | None = info.output_schema if info else None
        self.__doc__ = self.description

    def __call__(self, **arguments: Any) -> Any:
        return self.server.call(self.name, arguments, timeout=self.timeout, raw=self.raw)

    async def acall(self, **arguments: Any) -> Any:
        """The async variant: ``await tool.acall(**arguments)``."""
        return await self.server.acall(self.name, arguments, timeout=self.timeout, raw=self.raw)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} on {self.server!r})"
