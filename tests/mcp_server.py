"""An MCP server over stdio (the `mcp` SDK's `MCPServer`) for the conformance table's MCP row: `lookup_weather(city)`.

Run as `python tests/mcp_server.py`; it counts its calls in the file `MCP_CALLS` names, if set.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


@server.tool()
def lookup_weather(city: str) -> str:
    """The weather in `city`."""
    calls = os.environ.get("MCP_CALLS")
    if calls:
        with Path(calls).open("a") as log:
            log.write(f"{city}\n")
    return f"-3 °C, snow in {city}"


if __name__ == "__main__":
    server.run()
