"""The MCP server behind ``worldline mcp``: one agent's world model as MCP tools over
stdio (:mod:`worldline.mcp.server`). Importing it loads the ``mcp`` SDK, so only the
``mcp`` verb does."""

__all__: list[str] = []
