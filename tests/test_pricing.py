"""Costs are numbers that add up; the device enters only at pricing; losses are records."""

import dataclasses
import json

import pytest
import torch
from torch import nn

import dlperf
from dlperf.analysis import price_cost
from dlperf.dtypes import name_of, runnable_dtype, torch_dtype
from dlperf.errors import DlperfError
from dlperf.kernels.losses import AlignmentLoss, LayoutLoss, RereadLoss, WaveLoss
from dlperf.kernels.pricing import on_chip_bytes, time
from dlperf.kinds import Bound, Category, LossKind
from dlperf.ops import Cost, CostContext, Gemm, cost_of, registered_packets
from dlperf.precision import precision
from dlperf.tracing import is_free, trace


def test_costs_add_up_field_by_field():
    g1, g2 = Gemm(64, 64, 64), Gemm(128, 32, 16, count=3)
    a = Cost(flops=10, bytes_read=100, bytes_written=50, gemms=(g1,), layout_transpose_bytes=8)
    b = Cost(flops=5, bytes_read=1, bytes_written=2, kernels=2, gemms=(g2,), reread_bytes=4)
    total = a + b
    assert (total.flops, total.bytes, total.kernels) == (15, 153, 3)  # 100+50+1+2 bytes
    assert total.gemms == (g1, g2)
    assert (total.layout_transpose_bytes, total.reread_bytes) == (8, 4)
    assert sum([a, b]) == total  # sum() starts from 0


def test_handlers_see_only_the_precision_policy():
    assert [f.name for f in dataclasses.fields(CostContext)] == ["precision"]


def test_views_are_not_priced_by_the_registry():
    # the tracer's one list decides what moves no data; no handler second-guesses it
    assert not [p for p in registered_packets() if is_free(p)]


def _conv_row(x, gpu, policy):
    conv = nn.Conv2d(64, 128, kernel_size=3, padding=1, bias=False)
    a = dlperf.analyze(conv, x, gpu=gpu, precision=policy, training=False)
    return next(r for r in a.rows if "convolution" in r.op)


def test_nchw_transpose_is_a_hint_the_device_resolves():
    x = torch.empty(8, 64, 32, 32, device="meta")
    # x: 8*64*32*32 fp16 = 1,048,576 B; output 8*128*32*32 fp16 = 2,097,152 B;
    # one extra read and write of each: 2 * 3,145,728 = 6,291,456 B
    tc = _conv_row(x, "a100", "amp-fp16")
    (layout,) = [loss for loss in tc.losses if loss.kind == LossKind.LAYOUT]
    assert isinstance(layout, LayoutLoss) and layout.bytes == 6_291_456
    assert layout.describe() in tc.notes
    # the same data on CUDA cores (fp32, TF32 off) is never transposed
    simt = _conv_row(x, "a100", "fp32")
    assert not [loss for loss in simt.losses if loss.kind == LossKind.LAYOUT]
    # fp32 moves twice the bytes of fp16, transposes aside
    assert tc.bytes - layout.bytes == simt.bytes / 2


def _batch_norm_row(spec, shape):
    bn = nn.BatchNorm2d(shape[1])
    a = dlperf.analyze(bn, torch.empty(*shape, device="meta"), gpu=spec, precision="fp32")
    return next(r for r in a.rows if "batch_norm" in r.op and r.phase == "forward")


def test_batch_norm_rereads_what_does_not_fit_the_spec_on_chip():
    a100 = dlperf.gpu("a100")
    # 108 SMs x 256 KiB = 28,311,552 B on chip
    assert on_chip_bytes(a100) == 108 * 256 * 1024
    small = _batch_norm_row(a100, (8, 64, 32, 32))  # 2,097,152 B of fp32: fits
    assert not [loss for loss in small.losses if loss.kind == LossKind.REREAD]
    big_shape = (64, 256, 56, 56)  # 64*256*56*56*4 = 205,520,896 B: does not fit
    big = _batch_norm_row(a100, big_shape)
    (reread,) = [loss for loss in big.losses if loss.kind == LossKind.REREAD]
    assert isinstance(reread, RereadLoss) and reread.bytes == 205_520_896
    # the capacity is spec data: a device with room for it reads x once
    roomy = dataclasses.replace(
        a100, efficiency=dataclasses.replace(a100.efficiency, on_chip_bytes_per_sm=2**21)
    )  # 108 x 2 MiB = 226,492,416 B
    once = _batch_norm_row(roomy, big_shape)
    assert not [loss for loss in once.losses if loss.kind == LossKind.REREAD]
    assert big.bytes - once.bytes == 205_520_896


class _CrossEntropy(nn.Module):
    """A head and PyTorch's cross-entropy: log_softmax, then nll_loss on its output."""

    def __init__(self, head: nn.Module, weight: torch.Tensor | None = None):
        super().__init__()
        self.head = head
        self.register_buffer("weight", weight)

    def forward(self, x, target):
        return nn.functional.cross_entropy(self.head(x), target, weight=self.weight)


def _nll_costs(model, x, target) -> dict[str, Cost]:
    traced = trace(model, (x, target), precision="fp32")
    ctx = CostContext(precision("fp32"))
    return {e.op.split(".")[1]: cost_of(e, ctx) for e in traced.events if "nll_loss" in e.op}


def test_nll_loss_gathers_one_logit_a_target_and_its_backward_never_reads_the_logits():
    # N = 6 rows of C = 10 fp32 log-probabilities, 6 int64 targets, mean reduction.
    costs = _nll_costs(
        _CrossEntropy(nn.Linear(8, 10)),
        torch.empty(6, 8, device="meta"),
        torch.zeros(6, dtype=torch.int64, device="meta"),
    )
    forward, backward = costs["nll_loss_forward"], costs["nll_loss_backward"]
    # forward reads the targets (6 x 8 = 48 B) and self[i, t_i] per row (6 x 4 = 24 B),
    # not the 6 x 10 x 4 = 240 B of rows: 72 B; writes the loss and total_weight (2 x 4 B)
    assert (forward.bytes_read, forward.bytes_written) == (72, 8)
    # backward reads grad_output (a 4 B scalar), the targets (48 B) and total_weight
    # (4 B): 56 B, and not `self` (240 B); writes the zeroed 6 x 10 x 4 = 240 B
    # gradient, then -grad_output / total_weight at the 6 targets (6 x 4 = 24 B): 264 B,
    # in two kernels (the fill, the scatter)
    assert (backward.bytes_read, backward.bytes_written, backward.kernels) == (56, 264, 2)


def test_nll_loss_reads_one_class_weight_a_target_in_two_dimensions_too():
    # nll_loss2d: N = 2 images of C = 5 classes on 4 x 4 pixels, 32 int64 targets
    # (256 B), a (5,) fp32 class weight, mean reduction.
    costs = _nll_costs(
        _CrossEntropy(nn.Conv2d(3, 5, 1), weight=torch.ones(5)),
        torch.empty(2, 3, 4, 4, device="meta"),
        torch.zeros(2, 4, 4, dtype=torch.int64, device="meta"),
    )
    forward, backward = costs["nll_loss2d_forward"], costs["nll_loss2d_backward"]
    # weight[t_i] for 32 targets is at most the whole 5 x 4 = 20 B weight
    # forward: 256 B targets + 32 x 4 = 128 B gathered log-probabilities + 20 B weight
    assert (forward.bytes_read, forward.bytes_written) == (404, 8)
    # backward: grad_output 4 B + targets 256 B + weight 20 B + total_weight 4 B = 284 B;
    # writes the 2 x 5 x 4 x 4 x 4 = 640 B gradient and the 32 x 4 = 128 B scatter
    assert (backward.bytes_read, backward.bytes_written) == (284, 768)


def test_alignment_loss_is_a_record_and_the_note_its_prose():
    r = dlperf.gemm(1024, 1024, 1020, dtype="fp16", gpu="v100")
    cost = Cost(
        flops=r.flops, bytes_read=r.bytes, gemms=(Gemm(1024, 1024, 1020, 1, 1, "fp16", "fp16"),)
    )
    timing = time(cost, dlperf.gpu("v100"))
    (loss,) = [x for x in timing.losses if x.kind == LossKind.ALIGNMENT]
    assert isinstance(loss, AlignmentLoss)
    # 1020 = 127 x 8 + 4: misses the multiple of 8 Tensor Cores need; pad to 128 x 8 = 1024
    assert (loss.dim, loss.size, loss.multiple, loss.required, loss.padded) == (
        "k",
        1020,
        8,
        True,
        1024,
    )
    assert loss.describe() in r.notes
    assert loss.to_dict()["kind"] == "alignment"


def test_wave_loss_record_matches_the_gemm_report():
    r = dlperf.gemm(27904, 128, 8192, dtype="fp16", gpu="a100")
    gemm = Gemm(27904, 128, 8192, 1, 1, "fp16", "fp16")
    timing = time(Cost(flops=r.flops, bytes_read=r.bytes, gemms=(gemm,)), dlperf.gpu("a100"))
    (wave,) = [x for x in timing.losses if x.kind == LossKind.WAVE]
    assert isinstance(wave, WaveLoss)
    assert (wave.tiles, wave.waves, wave.efficiency) == (r.tiles, r.waves, r.wave_efficiency)
    assert wave.describe() in r.notes


def test_one_timing_for_gemm_and_for_a_priced_cost():
    r = dlperf.gemm(4096, 1000, 4096, dtype="bf16", gpu="h100")
    gemm = Gemm(4096, 1000, 4096, 1, 1, "bf16", "bf16")
    timing = price_cost(Cost(flops=r.flops, bytes_read=r.bytes, gemms=(gemm,)), dlperf.gpu("h100"))
    assert timing.seconds == r.time_s
    assert timing.bound == r.bound and isinstance(timing.bound, Bound)
    assert (timing.math_s, timing.memory_s, timing.latency_s) == (
        r.math_time_s,
        r.memory_time_s,
        r.latency_s,
    )


def test_enums_serialise_as_their_strings():
    r = dlperf.gemm(8192, 8192, 8192, dtype="fp16", gpu="v100")
    assert json.loads(json.dumps(r.to_dict()))["bound"] == "math"
    layer = nn.Linear(64, 64)
    a = dlperf.analyze(layer, torch.empty(8, 64, device="meta"), gpu="a100", precision="fp32")
    doc = json.loads(json.dumps(a.to_dict()))
    row = next(op for op in doc["ops"] if op["category"] == "contraction")
    assert row["phase"] == "forward" and row["bound"] in ("math", "memory", "latency")


def test_aggregates_are_sums_of_the_rows():
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.LayerNorm(512), nn.Linear(512, 10))
    a = dlperf.analyze(model, torch.empty(32, 256, device="meta"), gpu="a100", precision="fp32")
    total = a.totals
    for part in (a.phases, a.categories):
        assert sum(p["time_s"] for p in part.values()) == pytest.approx(total["time_s"])
        assert sum(p["flops"] for p in part.values()) == pytest.approx(total["flops"])
    top = {k: v for k, v in a.modules(depth=1).items() if "." not in k}
    assert sum(m["ops"] for m in top.values()) == len(a.rows)
    assert total["kernels"] == sum(r.kernels for r in a.rows)


def test_labels_come_from_registration_and_a_handler_may_narrow_them():
    dense = nn.Conv2d(32, 32, 3, padding=1)
    depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
    x = torch.empty(4, 32, 16, 16, device="meta")
    for conv, family in ((dense, "conv"), (depthwise, "conv-depthwise")):
        a = dlperf.analyze(conv, x, gpu="a100", precision="fp32", training=False)
        row = next(r for r in a.rows if "convolution" in r.op)
        assert (row.category, row.family) == (Category.CONTRACTION, family)


def test_one_fallback_for_a_dtype_a_device_lacks():
    v100, a100 = dlperf.gpu("v100"), dlperf.gpu("a100")
    assert runnable_dtype("bf16", v100) == "fp16"  # nearest half-precision path
    assert runnable_dtype("tf32", v100) == "fp32"
    assert runnable_dtype("bf16", a100) == "bf16"
    assert runnable_dtype("int64", a100) == "fp32"  # no math of its own: CUDA cores


def test_dtype_table_round_trips():
    for name in ("fp64", "fp32", "fp16", "bf16"):
        assert name_of(torch_dtype(name)) == name
    assert torch_dtype("half") == torch.float16 and torch_dtype("int64") == torch.int64
    assert name_of(torch.int64) == "int64"
    with pytest.raises(DlperfError, match="unknown dtype 'fp13'"):
        torch_dtype("fp13")


@pytest.mark.parametrize(
    "policy, master, cast",
    [("fp32", 4, 0), ("tf32", 4, 0), ("amp-fp16", 4, 2), ("amp-bf16", 4, 2), ("bf16", 2, 0)],
)
def test_precision_states_its_weight_bytes(policy, master, cast):
    p = precision(policy)
    # fp32 masters under fp32 and mixed precision; autocast keeps a half copy beside them
    assert (p.master_weight_bytes, p.grad_bytes, p.cast_weight_bytes) == (master, master, cast)
