"""Tools served by MCP servers, as plain callables for an agent's ``tools=``.

``pip install 'skillstate[mcp]'`` (the official MCP Python SDK, 2.x)::

    from skillstate.integrations.mcp import MCPServer

    files = MCPServer.stdio("uvx", ["mcp-server-filesystem", "/data"])
    search = MCPServer.http("https://mcp.example.com/mcp", headers={"Authorization": token})

    agent = Agent(..., tools={"read_file": files.tool("read_file"), **search.tools()})

A tool is declared by name like any other: a skill gets it only if it lists it in
``tools=[...]``, calls it with ``ctx.call("read_file", path=...)`` (keyword
arguments are the MCP tool's input), and the call is recorded in the step's event
with the result stored as an artifact. The result is the tool's structured content
when it declares an output schema, else the text of its content (one text block: a
``str``; several blocks: a list). An error the tool reports is raised as
:class:`MCPToolError`, so ``ctx.call(..., errors=(MCPToolError,))`` turns it into a
:class:`~skillstate.skills.skill.ToolError` value.

The SDK is asynchronous; skills are not. Each server gets its own event loop in a
background thread, started by the first call (or :meth:`MCPServer.start`) and
stopped by :meth:`MCPServer.close` (or the ``with`` block, or interpreter exit),
which also stops a stdio server's process. Every call has a timeout. Async code
awaits :meth:`MCPTool.acall` instead, from any event loop.

Credentials stay out of the store: ``headers`` and ``env`` values are given only to
the HTTP client and the server process, and if a server sends one back (in a
result or an error message) it is masked, ``***``, before a skill, an event or an
artifact sees it. ``repr`` shows neither.
"""

from __future__ import annotations

from skillstate.integrations.mcp.errors import (
    MCPCallError,
    MCPConnectionError,
    MCPProtocolError,
    MCPTimeout,
    MCPToolError,
)
from skillstate.integrations.mcp.server import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, MCPServer, MCPTool

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "MCPCallError",
    "MCPConnectionError",
    "MCPProtocolError",
    "MCPServer",
    "MCPTimeout",
    "MCPTool",
    "MCPToolError",
]
