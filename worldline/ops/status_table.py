"""``worldline status``'s table: a :class:`~worldline.ops.status.StatusReport` drawn
for the operator (one line per input durable, then streams and leases)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from worldline.ops.status import InputRow, StatusReport

__all__ = ["HEADER", "render"]


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{s:02d}s" if minutes else f"{s}s"


def _num(value: float | None, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


HEADER = (
    "INSTANCE",
    "STATE",
    "DURABLE",
    "LAG",
    "RATE/S",
    "APPLIED",
    "REDELIV",
    "DLQ",
    "STORE",
    "UPTIME",
    "HOST/PID",
)
_RIGHT = {"LAG", "RATE/S", "APPLIED", "REDELIV", "DLQ", "STORE", "UPTIME"}


def _table(
    header: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: set[str]
) -> str:
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(w) if name in right else cell.ljust(w)
            for cell, w, name in zip(row, widths, header, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def render(report: StatusReport) -> str:
    """The human table: one line per input durable, instance columns on its first."""
    counts: defaultdict[str, int] = defaultdict(int)
    for inst in report.instances:
        counts[inst.state] += 1
    summary = ", ".join(
        f"{counts[s]} {s}" for s in ("ok", "stale", "stopped", "missing")
    )
    if counts["stalled"]:
        summary += f", {counts['stalled']} stalled"
    stalls = [
        f"stalled: {inst.instance} {inp.durable} since "
        f"{inp.stalled_since.isoformat(timespec='seconds')}: {inp.error or '?'}"
        for inst in report.instances
        for inp in inst.inputs
        if inp.stalled_since is not None and inst.state == "stalled"
    ]
    rows: list[tuple[str, ...]] = []
    for inst in report.instances:
        where = f"{inst.host}/{inst.pid}" if inst.host is not None else "-"
        head = (
            inst.instance,
            inst.state,
            str(inst.dlq),
            _size(inst.store_bytes),
            _duration(inst.uptime_seconds),
            where,
        )
        inputs: list[InputRow | None] = [*inst.inputs] or [None]
        for n, inp in enumerate(inputs):
            first = n == 0
            rows.append(
                (
                    head[0] if first else "",
                    head[1] if first else "",
                    "-" if inp is None else inp.durable,
                    "-" if inp is None else _num(inp.lag),
                    "-" if inp is None else _num(inp.rate, "{:.1f}"),
                    "-" if inp is None else _num(inp.applied),
                    "-" if inp is None else _num(inp.redelivered),
                    head[2] if first else "",
                    head[3] if first else "",
                    head[4] if first else "",
                    head[5] if first else "",
                )
            )
    stream_rows = [
        (s.name, _num(s.messages), _size(s.bytes), _num(s.consumers))
        for s in report.streams
    ]
    lease_rows = [
        (
            lease.partition,
            lease.holder,
            str(lease.term),
            " ".join(f"{k}:{v}" for k, v in sorted(lease.published.items())) or "-",
        )
        for lease in report.leases
    ]
    leases = (
        ["", _table(("LEASE", "HOLDER", "TERM", "PUBLISHED"), lease_rows, {"TERM"})]
        if lease_rows
        else []
    )
    # Junk over a lease key: what it is now, or how often it was taken back.
    for lease in report.leases:
        if lease.unreadable is not None:
            leases.append(
                f"lease {lease.partition}: unreadable, the replicas take it back: "
                f"{lease.unreadable}"
            )
        elif lease.repairs:
            leases.append(
                f"lease {lease.partition}: taken back {lease.repairs}x from an "
                f"unreadable value; last: {lease.repaired}"
            )
    return "\n".join(
        [
            f"nats: {report.nats}  instances: {len(report.instances)} ({summary})",
            "",
            _table(HEADER, rows, _RIGHT),
            *stalls,
            "",
            _table(
                ("STREAM", "MESSAGES", "BYTES", "CONSUMERS"),
                stream_rows,
                {"MESSAGES", "BYTES", "CONSUMERS"},
            ),
            *leases,
        ]
    )
