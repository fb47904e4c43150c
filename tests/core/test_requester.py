"""Who asks, as the server vouches for it (``worldline/actors/runtime/requester.py``):
the ``Nats-Request-Info`` header on a secured deploy, the operator without one, and
only the body's claim on the open bus. Never the reply subject."""

from __future__ import annotations

import json

import pytest

from worldline.actors.runtime.requester import (
    ANONYMOUS,
    AS_OPERATOR,
    REQUEST_INFO,
    agent_account,
    agent_of_account,
    attested,
    claimed,
)
from worldline.protocols.subjects import is_reply_subject

SPOCK_KEY = "U" + "S" * 55

# As nats-server 2.15 writes it on a request crossing a share:true service import.
REAL = json.dumps(
    {
        "start": "2026-12-01T19:46:38.503077845Z",
        "host": "127.0.0.1",
        "id": 9,
        "acc": "AGENT_spock",
        "user": SPOCK_KEY,
        "lang": "python3",
        "rtt": 604437,
        "kind": "Client",
    }
)


def test_the_header_names_the_account_and_user() -> None:
    spock = attested({REQUEST_INFO: REAL})
    assert spock.attested
    assert spock.key == f"acc:AGENT_spock/{SPOCK_KEY}"
    assert spock.agent == "spock"
    assert not spock.operator
    assert spock.may_read_as("spock")
    assert not spock.may_read_as("zora")
    assert spock.or_claim("zora") is spock  # the body's claim is ignored


def test_no_header_on_a_secured_deploy_is_the_operator() -> None:
    for headers in (None, {}, {"Other": "x"}):
        asker = attested(headers)
        assert asker is AS_OPERATOR
        assert asker.operator
        assert asker.may_read_as("zora")


@pytest.mark.parametrize(
    "raw",
    ["not json", "[1, 2]", json.dumps({"acc": 7}), json.dumps({"acc": "ACTORS"})],
)
def test_a_header_naming_no_agent_reads_as_no_agent(raw: str) -> None:
    asker = attested({REQUEST_INFO: raw})
    assert asker.attested
    assert asker.agent == ""
    assert not asker.operator
    assert not asker.may_read_as("zora")
    assert asker.key.startswith("acc:")


def test_agent_accounts_are_named_after_their_agent() -> None:
    assert agent_account("zora") == "AGENT_zora"
    assert agent_of_account("AGENT_zora") == "zora"
    for account in ("zora", "ACTORS", "$G", "AGENT_", "AGENT_a.b", "AGENT_operator"):
        assert agent_of_account(account) == ""


def test_on_the_open_bus_the_body_is_only_a_claim() -> None:
    assert not ANONYMOUS.attested
    assert ANONYMOUS.or_claim("zora") == claimed("zora")
    zora = claimed("zora")
    assert zora.key == "claim:zora"
    assert not zora.attested
    assert zora.may_read_as("spock")  # nothing to check it against
    assert claimed("") is ANONYMOUS
    assert claimed("operator").key != AS_OPERATOR.key


@pytest.mark.parametrize(
    ("subject", "answered"),
    [
        ("_R_.O95flC.9MbEId", True),
        ("_INBOX.abc.def", True),
        ("_R_.O95flC", False),
        ("_R_.a.b.c", False),
        ("_R_.$JS.API", False),
        ("_R_", False),
    ],
)
def test_an_imported_requests_mapped_reply_is_answered(
    subject: str, answered: bool
) -> None:
    assert is_reply_subject(subject) is answered
