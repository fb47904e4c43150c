"""The operator's tools, behind ``worldline status``, ``creds`` and ``replay``.

:mod:`~worldline.ops.status` reads every actor's heartbeat and JetStream's consumer
and stream info into one report (drawn as a table by
:mod:`~worldline.ops.status_table`); :mod:`~worldline.ops.creds` writes the server's
``auth.conf`` and one credentials file per agent, actor and operator;
:mod:`~worldline.ops.replay` rebuilds a world from its op log and hashes it. Agents
never need these.
"""

__all__: list[str] = []
