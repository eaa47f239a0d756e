"""jsonable: one walk from a dataclass's fields to the JSON of `--json`."""

import json
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from dlperf.jsonable import Jsonable, fields_dict, jsonable


class Colour(str, Enum):
    RED = "red"


@dataclass
class Inner(Jsonable):
    x: int
    hidden: int = field(default=0, metadata={"json": False})


@dataclass
class Outer:
    name: str = field(metadata={"json": "label"})
    colour: Colour
    pair: tuple
    inner: Inner
    values: np.ndarray
    count: np.int64
    by_colour: dict


def test_fields_become_json_values_in_order():
    o = Outer("a", Colour.RED, (1, (2, 3)), Inner(4, hidden=5), np.arange(2), np.int64(7),
              {Colour.RED: 1.5})  # fmt: skip
    doc = fields_dict(o)
    assert list(doc) == ["label", "colour", "pair", "inner", "values", "count", "by_colour"]
    assert doc == {"label": "a", "colour": "red", "pair": [1, [2, 3]], "inner": {"x": 4},
                   "values": [0, 1], "count": 7, "by_colour": {"red": 1.5}}  # fmt: skip
    assert type(doc["count"]) is int and type(doc["colour"]) is str
    json.dumps(doc)


def test_skip_and_last_reorder_without_copying_the_field_list():
    o = Outer("a", Colour.RED, (), Inner(1), np.zeros(0), np.int64(0), {})
    assert list(fields_dict(o, skip=("values", "count"), last=("colour", "name"))) == [
        "pair", "inner", "by_colour", "colour", "label"
    ]  # fmt: skip
    assert jsonable([Inner(2), None, 1.5]) == [{"x": 2}, None, 1.5]
