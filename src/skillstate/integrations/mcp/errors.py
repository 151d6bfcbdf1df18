"""The errors of MCP tool calls: every one a :class:`~skillstate.errors.SkillstateError`."""

from __future__ import annotations

from skillstate.errors import SkillstateError

__all__ = [
    "MCPCallError",
    "MCPConnectionError",
    "MCPProtocolError",
    "MCPTimeout",
    "MCPToolError",
]


class MCPCallError(SkillstateError):
    """A call to an MCP server failed: the base of this module's errors."""

    def __init__(self, message: str, *, server: str, tool: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.tool = tool


class MCPToolError(MCPCallError):
    """The tool ran and reported an error (an ``isError`` result); the message is its text.

    Usually an expected answer ("no such file"): catch it, or call the tool with
    ``ctx.call(name, errors=(MCPToolError,), ...)`` to get a ``ToolError`` value.
    """


class MCPProtocolError(MCPCallError):
    """The server answered the request with a JSON-RPC error (``code``)."""

    def __init__(self, message: str, *, server: str, tool: str | None, code: int) -> None:
        super().__init__(message, server=server, tool=tool)
        self.code = code


class MCPTimeout(MCPCallError, TimeoutError):
    """The call (or the connection) took longer than its timeout and was abandoned."""


class MCPConnectionError(MCPCallError, ConnectionError):
    """The server could not be started or reached, or the connection broke.

    After a broken connection the next call connects again (a stdio server is
    started anew).
    """


def innermost(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def describe(exc: BaseException) -> str:
    leaf = innermost(exc)
    text = str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__
