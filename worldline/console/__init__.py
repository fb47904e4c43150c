"""The console: a read-only web page for the people supervising a crew (beliefs,
contradictions, sources, calibration, agents, actors), live from the change feed, and
the gateway that serves it beside MCP over HTTP (:mod:`worldline.console.gateway`).
Importing it loads starlette (the ``mcp`` extra), so only ``worldline mcp --http``
does."""

__all__: list[str] = []
