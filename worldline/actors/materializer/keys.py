"""Where the crew world lives in the materializer's store: one builder per state key.

Every key is ``<kind>/<world>`` or ``<kind>/<world>/<rest>``, so
``worldline.actors.runtime.memory.state_hash`` can hash one world. The materializer's
other keys (beliefs, the op log's bookkeeping, the conflict log) are built in
:mod:`worldline.actors.materializer.core`.

State keys: ``decl/<w>``, ``entity/<w>/<ref>``, ``edge/<w>/<id>``,
``known/<w>/<belief>``, ``bedge/<w>/<id>``, ``bedgeby/<w>/<id>``,
``sent/<w>/<rule>/<ref>/<agent>``, ``inbox/<w>/<agent>/<message id>``,
``inboxsum/<w>/<agent>``.
"""

from __future__ import annotations

__all__ = [
    "belief_edge_author_key",
    "belief_edge_key",
    "decl_key",
    "edge_key",
    "entity_key",
    "inbox_key",
    "known_key",
    "sent_key",
    "summary_key",
]


def decl_key(world: str) -> bytes:
    return f"decl/{world}".encode()


def entity_key(world: str, ref: str) -> bytes:
    return f"entity/{world}/{ref}".encode()


def edge_key(world: str, edge_id: str) -> bytes:
    return f"edge/{world}/{edge_id}".encode()


def sent_key(world: str, rule: str, ref: str, agent: str) -> bytes:
    return f"sent/{world}/{rule}/{ref}/{agent}".encode()


def inbox_key(world: str, agent: str, message_id: str) -> bytes:
    return f"inbox/{world}/{agent}/{message_id}".encode()


def summary_key(world: str, agent: str) -> bytes:
    return f"inboxsum/{world}/{agent}".encode()


def known_key(world: str, belief_id: str) -> bytes:
    """A belief the op log has created (whether or not its posterior arrived)."""
    return f"known/{world}/{belief_id}".encode()


def belief_edge_key(world: str, edge_id: str) -> bytes:
    return f"bedge/{world}/{edge_id}".encode()


def belief_edge_author_key(world: str, edge_id: str) -> bytes:
    """Who first linked the belief edge ``edge_id`` (its author, who may change it)."""
    return f"bedgeby/{world}/{edge_id}".encode()
