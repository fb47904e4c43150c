"""Who asked a request, as the NATS server vouches for it: never a reply subject, a
body field or a header the requester could set.

On a **secured** deploy (the actor connected with credentials, as the materializer's
first-declarer rule decides) each agent is a user of its own NATS account, and asks
the actors' verbs through a service import with ``share: true``. For every request
that crosses such an import the server writes the ``Nats-Request-Info`` header itself
(JSON: the requesting account ``acc``, the user's public key ``user``, the
connection's ``id``, ``rtt``, ``server``, ...) and replaces any header of that name
the requester set, so the account and user it names are attested. A request without
the header did not cross an import: it came from inside the actors' own account (an
actor, or the operator, whose credentials hold that account), and is trusted as the
operator.

On the **open** default bus (no credentials) nothing is attested: any process can
publish anything, so the agent name a request's body declares is only a claim, and
it is all there is (quotas count claims; ownership is the session id, a secret).
The reply subject is never used: any requester can put any ``_INBOX.<token>`` on a
request, someone else's included.

An agent's account is named after it (:func:`agent_of_account`); an attested
account that names no agent is keyed by its account and user, and may read as no
agent (:meth:`Requester.may_read_as`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from worldline.protocols.world import OPERATOR

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "AGENT_ACCOUNT_PREFIX",
    "ANONYMOUS",
    "AS_OPERATOR",
    "REQUEST_INFO",
    "Requester",
    "agent_account",
    "agent_of_account",
    "attested",
    "claimed",
]

# The header nats-server writes on a request that crossed a service import shared
# with ``share: true`` (and rewrites when the requester set one).
REQUEST_INFO: Final = "Nats-Request-Info"
# Each agent's own NATS account: this prefix plus the agent's name.
AGENT_ACCOUNT_PREFIX: Final = "AGENT_"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def agent_account(agent: str) -> str:
    """The NATS account of ``agent`` on a secured deploy."""
    return f"{AGENT_ACCOUNT_PREFIX}{agent}"


def agent_of_account(account: str) -> str:
    """The agent whose account this is, or "" when it is no agent's account."""
    name = account.removeprefix(AGENT_ACCOUNT_PREFIX)
    if name in (account, OPERATOR) or not _NAME.fullmatch(name):
        return ""
    return name


@dataclass(frozen=True, slots=True)
class Requester:
    """Who asked: what quotas and ownership count by, and the agent it is."""

    # What per-requester limits and ownership key by: ``acc:<account>/<user>``
    # (attested), ``operator`` (inside the actors' account), ``claim:<agent>`` or
    # ``claim:`` (open bus: only a claim).
    key: str
    agent: str = ""  # the agent it is ("" when it is none, or unknown)
    attested: bool = False  # the server vouches for ``key`` and ``agent``

    @property
    def operator(self) -> bool:
        """From inside the actors' account on a secured deploy."""
        return self.attested and self.key == OPERATOR

    def may_read_as(self, agent: str) -> bool:
        """Whether this requester may read what is ``agent``'s own (its view, its
        worldview): itself, or anyone for the operator; on the open bus, anyone
        (nothing is attested there)."""
        return not self.attested or self.operator or agent == self.agent

    def or_claim(self, agent: str) -> Requester:
        """This requester if attested, else the agent the request's body claims."""
        return self if self.attested else claimed(agent)

    def label(self, fallback: str = "") -> str:
        """How an error names it."""
        return self.agent or fallback or self.key or "(anonymous)"


AS_OPERATOR: Final = Requester(key=OPERATOR, agent=OPERATOR, attested=True)
ANONYMOUS: Final = Requester(key="claim:")


def claimed(agent: str) -> Requester:
    """An open bus's requester: the agent the body names, only a claim."""
    return Requester(key=f"claim:{agent}", agent=agent) if agent else ANONYMOUS


def attested(headers: Mapping[str, str] | None) -> Requester:
    """A secured deploy's requester, from the server-written ``Nats-Request-Info``
    header: the account and user it names, or the operator without one."""
    raw = (headers or {}).get(REQUEST_INFO)
    if raw is None:
        return AS_OPERATOR
    try:
        info = json.loads(raw)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        info = {}
    account, user = info.get("acc"), info.get("user")
    account = account if isinstance(account, str) else ""
    user = user if isinstance(user, str) else ""
    return Requester(
        key=f"acc:{account}/{user}", agent=agent_of_account(account), attested=True
    )
