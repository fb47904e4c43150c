"""msgspec's validation errors in words a person can act on: which field, what is
wrong with it, and what to do ("Expected `str` of length >= 1 - at `$.text`" becomes
"the text of the belief is empty: give a non-empty text")."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["explain", "named"]

# What a person calls each message the SDK validates (else its class name).
_NAMES = {
    "AddBelief": "the belief",
    "AddEvidence": "the evidence",
    "Observe": "the observation",
    "SetTrust": "the trust setting",
    "LinkBeliefs": "the belief edge",
    "CloseBelief": "the retraction or resolution",
    "SetField": "the field write",
    "UpsertEntity": "the entity",
    "AddEdge": "the edge",
    "PutWork": "the work item",
}


def named(type_name: str) -> str:
    """``AddBelief`` -> ``the belief``; a name not listed comes back as it is."""
    return _NAMES.get(type_name, type_name)


_ERROR = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_LENGTH = re.compile(r"^Expected `(?P<kind>\w+)` of length (?P<op>[<>]=) (?P<n>\d+)$")
_BOUND = re.compile(r"^Expected `(?P<kind>\w+)` (?P<op>[<>]=?) (?P<n>[-\d.e+]+)$")
_PATTERN = re.compile(r"^Expected `str` matching regex (?P<regex>.+)$")
_ENUM = re.compile(r"^Invalid enum value (?P<value>.+)$")
_STEP = re.compile(r"\.(?P<name>\w+)|\[(?P<index>\d+)\]")


def _field(path: str) -> str:
    """``.text`` -> ``text``; ``.items[2].text`` -> ``items[2].text``."""
    return path.lstrip(".") or "the value"


def _choices(message: type | None, path: str) -> list[str]:
    """The values a ``Literal`` field at ``path`` of ``message`` allows (sorted),
    or none when the path leads elsewhere."""
    if message is None:
        return []
    import msgspec.inspect as mi  # only on an error: keeps `import worldline` light

    found: list[mi.Type] = [mi.type_info(message)]
    for step in _STEP.finditer(path):
        reached: list[mi.Type] = []
        for info in found:
            for option in info.types if isinstance(info, mi.UnionType) else [info]:
                if step["name"] and isinstance(option, mi.StructType):
                    reached += [
                        f.type for f in option.fields if f.encode_name == step["name"]
                    ]
                elif step["index"] and isinstance(
                    option, mi.ListType | mi.VarTupleType
                ):
                    reached.append(option.item_type)
                elif step["index"] and isinstance(option, mi.TupleType):
                    reached += option.item_types[int(step["index"]) :][:1]
        found = reached
    values: set[Any] = set()
    for info in found:
        for option in info.types if isinstance(info, mi.UnionType) else [info]:
            if isinstance(option, mi.LiteralType):
                values.update(option.values)
    return sorted(str(v) for v in values)


def explain(error: str, what: str = "", message: type | None = None) -> str:
    """``error`` (a ``msgspec.ValidationError``'s text) as one plain sentence naming
    the field of ``what`` (default: what a person calls ``message``, else "the
    request") and the fix; an error it does not recognise keeps its wording, with
    the field named first. Given the ``message`` type, a value a ``Literal`` field
    does not allow is answered with the values it does."""
    if not what:
        what = "the request" if message is None else named(message.__name__)
    found = _ERROR.match(error.strip())
    assert found is not None  # the pattern matches any text
    problem, field = found["what"], _field(found["path"] or "")
    if length := _LENGTH.match(problem):
        count = int(length["n"])
        unit = "characters" if length["kind"] == "str" else "items"
        if length["op"] == ">=" and count == 1:
            return f"the {field} of {what} is empty: give a non-empty {field}"
        if length["op"] == ">=":
            return f"the {field} of {what} is too short: give at least {count} {unit}"
        return f"the {field} of {what} is too long: give at most {count} {unit}"
    if bound := _BOUND.match(problem):
        words = {"<=": "at most", ">=": "at least", "<": "below", ">": "above"}
        limit = f"{words[bound['op']]} {bound['n']}"
        return f"the {field} of {what} is out of range: give a number {limit}"
    if pattern := _PATTERN.match(problem):
        return (
            f"the {field} of {what} has characters it may not hold: it must match "
            f"{pattern['regex']}"
        )
    if (enum := _ENUM.match(problem)) and (
        choices := _choices(message, found["path"] or "")
    ):
        return (
            f"the {field} of {what} is not valid: {enum['value']} is none of "
            + ", ".join(choices)
        )
    return f"the {field} of {what} is not valid: {problem}"
