"""The MCP server behind ``worldline mcp``: an agent's world model as MCP tools,
resources and a prompt, over stdio or streamable HTTP (:mod:`worldline.mcp.server`).
Importing it loads the ``mcp`` SDK (the ``mcp`` extra), so only the ``mcp`` verb does;
:mod:`worldline.mcp.auth` (the HTTP tokens file) does not."""

__all__: list[str] = []
