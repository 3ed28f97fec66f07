"""A small MCP server (the official `mcp` SDK) for the README's MCP example: a seed catalogue.

runfold starts it over stdio with the run (`[mcp.seeds]` in .runfold/config.toml) and stops it
with the run; its tools reach the model as `seeds__sowing_month` and `seeds__order`.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("seeds")

MONTHS = {"basil": "April", "tomato": "March", "bean": "May"}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def sowing_month(plant: str) -> str:
    """The month to sow a plant in (basil, tomato, bean)."""
    return MONTHS.get(plant.lower(), "unknown: ask a gardener")


@server.tool()
def order(plant: str, packets: int) -> str:
    """Order seed packets of a plant (this example only says what it would order)."""
    return f"would order {packets} packet(s) of {plant} seeds"


if __name__ == "__main__":
    server.run("stdio")
