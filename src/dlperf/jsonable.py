"""Reports as plain JSON values, from their dataclass fields.

Every `--json` document is a report's `to_dict()`. Most reports are their
fields as they are, so one walk writes them: `fields_dict` takes a
dataclass's fields in declaration order and `jsonable` makes each value
one `json.dumps` takes (an enum's value, numpy scalars and arrays as Python
numbers and lists, tuples as lists, a nested report through its own
`to_dict`). A report whose JSON differs from its fields (computed keys, a
different order) builds its `to_dict` on `fields_dict`.

A field's metadata steers the walk: `field(metadata={"json": False})`
leaves it out, `field(metadata={"json": "key"})` writes it under another key.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

import numpy as np


def jsonable(value):
    """`value` in JSON's types; an object with a `to_dict` writes itself."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_dict(value)
    if isinstance(value, dict):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return value


def _key(key):
    return key.value if isinstance(key, Enum) else key


def fields_dict(obj, skip: tuple[str, ...] = (), last: tuple[str, ...] = ()) -> dict:
    """The dataclass `obj`'s fields, in order, as JSON values; `skip` leaves
    out fields the caller writes itself, `last` moves fields to the end (in
    that order) where a document has always had them there."""
    kept = [f for f in dataclasses.fields(obj) if f.name not in skip]
    kept = [f for f in kept if f.name not in last] + [f for n in last for f in kept if f.name == n]
    out = {}
    for f in kept:
        key = f.metadata.get("json", f.name)
        if key is not False:
            out[key] = jsonable(getattr(obj, f.name))
    return out


class Jsonable:
    """A dataclass whose JSON is its fields as they are."""

    def to_dict(self) -> dict:
        return fields_dict(self)
