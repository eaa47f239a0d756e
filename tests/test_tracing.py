"""The pieces of the tracer: the free-op list, backward labels, repeated blocks."""

from collections import Counter

import torch
from torch import nn

from dlperf.tracing import OpEvent, repeated_blocks, trace
from dlperf.tracing.views import VIEWS, is_free


def test_the_free_op_list_names_real_aten_packets_once():
    missing = [name for name in VIEWS if getattr(torch.ops.aten, name, None) is None]
    assert missing == []
    assert len(set(VIEWS)) == len(VIEWS)
    # a packet and each of its overloads are free; data-moving ops are not
    assert is_free("aten.view") and is_free("aten.view.default") and is_free("aten.view.dtype")
    assert is_free("prim.device.default")  # primitives describe tensors only
    assert not is_free("aten.mm.default") and not is_free("aten.clone.default")


def test_free_ops_are_counted_not_recorded():
    class Shuffle(nn.Module):
        def forward(self, x):
            return x.view(8, 4).t().contiguous()

    t = trace(Shuffle(), torch.empty(4, 8), training=False)
    # view and t move nothing; the copy that makes the transpose contiguous does
    assert [e.packet for e in t.events] == ["aten.clone"]
    assert t.free_ops >= 2
    assert not any(is_free(e.op) for e in t.events)


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.branch = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        y = self.a(x)
        return self.out(y + self.branch(y))  # y reaches `out` twice: directly and via `branch`


def _backward_mms(events: list[OpEvent]) -> Counter:
    return Counter(e.module for e in events if e.phase == "backward" and e.packet == "aten.mm")


def test_backward_ops_of_a_residual_branch_belong_to_the_branch():
    t = trace(_Residual(), torch.empty(2, 8), precision="fp32")
    # a Linear's backward is one mm for the weight's gradient, and one more for
    # its input's gradient when the input needs one: `out` and `branch` take
    # inputs that depend on weights (2 each); `a` takes the model input (1)
    assert _backward_mms(t.events) == Counter({"out": 2, "branch": 2, "a": 1})
    forward = Counter(e.module for e in t.events if e.phase == "forward" and "addmm" in e.op)
    assert forward == Counter({"a": 1, "branch": 1, "out": 1})


class _Sub(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(_Sub(), _Sub())

    def forward(self, x):
        return self.inner(x)


def test_repeated_blocks_are_the_outermost_repeats_with_submodules():
    model = nn.Sequential(nn.Linear(4, 4), _Block(), _Block(), _Block(), nn.ReLU(), nn.ReLU())
    # children by type: Linear x1 (not repeated), _Block x3 (repeated, with
    # submodules), ReLU x2 (repeated, but leaves); the _Sub pairs inside each
    # block repeat too but lie within a block already found
    assert repeated_blocks(model) == ["1", "2", "3"]
    assert trace(model, torch.empty(2, 4), training=False).blocks == ["1", "2", "3"]
