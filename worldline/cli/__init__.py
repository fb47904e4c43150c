"""The ``worldline`` command: run the actors, and talk to a world from a shell.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr), something that
does not exist (a belief id, an agent the world does not declare), or credentials
the server refuses for what the verb needs ("permission denied publishing to ...":
another agent's, say); 3 the world rejected the request (the reason is printed); 4 the
bus cannot be reached, holds no worldline streams, or refused the request (a JetStream
error such as storage full, named with its fix), or no actor applied the request in
time; 1 a failure of our own side (a store that cannot open, a
stream whose stored config cannot be updated, a replay that does not match);
130 interrupted before it could finish. With ``--json``, an answer shows every key
(empty lists, nulls and defaults included), and an error is one JSON object on
stderr instead of the line: {"error": the message, "code": the exit code, "meaning":
what the code means}. The client options (--nats, --world, --agent, --creds, --json,
--timeout) go before the verb or after it; ``--version`` prints the version, and
``worldline completion bash|zsh`` a shell completion script.
"""

# One module per verb group: app (main, running a verb, each error to its exit code),
# parsing (the parser), common (defaults, exit codes, output), beliefs, crew, operate
# (up, actor, status, creds, export, replay), sim and mcp. The exit codes stay in this
# docstring: docs/cli.md quotes it (worldline/cli_reference.py).

from worldline.cli.app import main, parser

__all__ = ["main", "parser"]
