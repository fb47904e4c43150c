"""Which hosts ``worldline mcp --http`` answers to: parsing and checking
``--allowed-hosts`` entries, and telling loopback binds from others.

Pure (no MCP SDK import), so the CLI's parser can check the option on every install;
:func:`worldline.mcp.server.transport_security` turns the entries into the MCP SDK's
Host/Origin checks.
"""

from __future__ import annotations

import ipaddress

__all__ = [
    "ALLOWED_HOSTS_FIX",
    "LOOPBACK_NAMES",
    "allowed_host",
    "bracketed",
    "loopback",
]


def loopback(host: str) -> bool:
    """Whether binding ``host`` listens on loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")  # always answered
ALLOWED_HOSTS_FIX = (
    "pass --allowed-hosts with the names clients use to reach this server "
    "(e.g. --allowed-hosts mcp.example.org,10.0.0.5); only those pass the "
    "Host/Origin checks that stop DNS rebinding"
)


def bracketed(host: str) -> str:
    """A host as it appears in a Host header: an IPv6 address in brackets."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


def allowed_host(text: str) -> tuple[str, str]:
    """One ``--allowed-hosts`` entry, checked: a name or address, optionally with
    ``:PORT`` (an IPv6 address in brackets when it has a port), as (the host as a
    Host header shows it, the port or "").

    Raises:
        ValueError: empty, a wildcard, or not a host (a scheme, a path, spaces).
    """
    entry = text.strip().lower()
    name, port, bad = entry, "", not entry or any(c in entry for c in "*/@?#\\ ,")
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
        bad = bad or (rest != "" and not rest.startswith(":"))
    elif entry.count(":") == 1:  # NAME:PORT (a bare IPv6 address has several)
        name, port = entry.split(":")
    if bad or not name or not (port == "" or port.isdigit()):
        raise ValueError(
            f"{text!r} is not a host name or address (NAME, NAME:PORT, [IPv6]:PORT; "
            "no wildcards, schemes or paths)"
        )
    return bracketed(name), port
