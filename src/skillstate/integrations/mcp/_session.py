"""The session thread: an event loop holding the SDK's client open, calls submitted to it."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar
from urllib.parse import parse_qsl, urlsplit

from skillstate.integrations.mcp.errors import MCPConnectionError, MCPTimeout, describe

if TYPE_CHECKING:
    from mcp import Client

    from skillstate.integrations.mcp.server import MCPServer

T = TypeVar("T")

CLOSE_WAIT = 15.0
"""How long ``close`` waits for the session to wind down (a stdio server gets
SIGTERM, then SIGKILL, within the SDK's own bounded waits)."""

# ---------------------------------------------------------------- transports


@dataclass(frozen=True)
class Stdio:
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    stderr: TextIO | None

    def __str__(self) -> str:
        return " ".join([Path(self.command).name, *self.args])


@dataclass(frozen=True)
class Http:
    url: str
    headers: Mapping[str, str]

    def __str__(self) -> str:
        # Never userinfo or a query string: either may carry a credential.
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"


def secret_values(spec: Stdio | Http, extra: Iterable[str]) -> list[str]:
    """The values a server was given that must never be written back anywhere."""
    values = list(extra)
    if isinstance(spec, Stdio):
        values += spec.env.values()
    else:
        for value in spec.headers.values():
            values.append(value)
            scheme, _, credential = value.partition(" ")  # "Bearer xyz": "xyz" alone too
            if credential and scheme.isalpha():
                values.append(credential.strip())
        parts = urlsplit(spec.url)
        values += [parts.password or "", *(v for _, v in parse_qsl(parts.query))]
    return [v for v in values if v]


# ---------------------------------------------------------------- the session thread


class Connection:
    """One live session: an event loop in a thread, holding the SDK's client open.

    The client is entered and left by one task (the SDK's task groups require it);
    calls run as other tasks of the same loop, submitted from any thread.
    """

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.stop = asyncio.Event()
        self.client: Client | None = None
        self.broken = False
        self.http_status: int | None = None
        self.main = self.loop.create_task(self._hold())
        self.thread = threading.Thread(target=self._run, name=f"mcp {server.name}", daemon=True)

    @property
    def usable(self) -> bool:
        return not self.broken and not self.main.done() and self.thread.is_alive()

    def start(self, timeout: float) -> None:
        self.thread.start()
        try:
            self.ready.result(timeout)
        except concurrent.futures.TimeoutError:
            self.shutdown()
            raise MCPTimeout(
                f"MCP server {self.server.name} did not complete the handshake within {timeout:g}s",
                server=self.server.name,
            ) from None
        except Exception as exc:
            self.shutdown()
            status = f" (HTTP {self.http_status})" if self.http_status else ""
            message = f"cannot connect to MCP server {self.server.name}{status}: {describe(exc)}"
            raise MCPConnectionError(self.server.scrub(message), server=self.server.name) from None
        except BaseException:  # KeyboardInterrupt while waiting: stop what was started
            self.shutdown()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.main)
        finally:
            with contextlib.suppress(Exception):
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                gathered = asyncio.gather(*pending, return_exceptions=True)
                self.loop.run_until_complete(gathered)
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _hold(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                self.client = await self.server._open(stack, self)
                self.ready.set_result(None)
                await self.stop.wait()
        except BaseException as exc:  # the thread's last word: nobody else would see it
            if not self.ready.done():
                failure = (
                    exc if isinstance(exc, Exception) else ConnectionAbortedError(describe(exc))
                )
                self.ready.set_exception(failure)
        finally:
            self.client = None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop closed under us
            coro.close()
            self.broken = True
            raise MCPConnectionError(
                f"the connection to MCP server {self.server.name} is closed",
                server=self.server.name,
            ) from None

    def _halt(self) -> None:
        if self.ready.done():
            self.stop.set()  # a clean exit: the SDK stops the process or ends the session
        else:
            self.main.cancel()  # still connecting

    def shutdown(self) -> None:
        if self.thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._halt)
            self.thread.join(CLOSE_WAIT)


LIVE: weakref.WeakSet[MCPServer] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Stop every server still running when the interpreter exits (no orphaned process)."""
    for server in list(LIVE):
        with contextlib.suppress(Exception):
            server.close()
