"""torch.compile pricing (`dlperf.compiling`): chains of point-wise, reduction
and normalization ops between contractions become one kernel whose bytes are
the chain's external inputs and outputs; in inference, conv-BN(-ReLU) folds.

Expected bytes are derived in the comments from the tiny modules' shapes
(fp32: 4 bytes an element)."""

from collections import Counter

import pytest
import torch
from torch import nn

import dlperf
from dlperf.compiling import Fold, FusedGroup, fuse
from dlperf.dtypes import name_of
from dlperf.kernels.pricing import GemmTimer, time
from dlperf.ops import CostContext, costed, fallback
from dlperf.optimizer import optimizer_cost
from dlperf.run import Session, resolve
from dlperf.tracing import LOSS_MODULE, trace


def _priced(recorded, optimizer: str | None = None):
    """Each event with its cost, as the analysis prices them before timing."""
    ctx = CostContext(recorded.precision)
    priced = [(e, costed(e, ctx) or fallback(e)) for e in recorded.events]
    if recorded.training and optimizer:
        priced.append(optimizer_cost(recorded, optimizer))
    return priced


def _seconds(priced, spec) -> float:
    """The step's time: the sum of its ops' times, each priced on `spec`."""
    timer = GemmTimer(spec)
    total = 0.0
    for event, found in priced:
        tensors = event.tensors() or list(event.outputs)
        dtype = name_of(tensors[0].dtype, "fp32") if tensors else "fp32"  # optimizer: none
        if found.cost.gemms:
            dtype = found.cost.gemms[0].dtype
        total += time(found.cost, spec, dtype, timer).seconds
    return total


def analyze_compiled(recorded, spec, optimizer: str | None = "adamw"):
    """(eager seconds, compiled seconds, fusion summary) of a traced step."""
    priced = _priced(recorded, optimizer)
    compiled, summary = fuse(priced, recorded)
    return _seconds(priced, spec), _seconds(compiled, spec), summary


def _fused_rows(priced):
    return [(e, c) for e, c in priced if e.op.startswith("fused:")]


class Chain(nn.Module):
    """Linear -> gelu -> *2 -> +1 -> LayerNorm -> Linear, on (4, 16) inputs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        h = nn.functional.gelu(self.a(x))
        return self.b(self.ln(h * 2 + 1))


def test_storage_ids_follow_tensors_through_views_and_saves():
    class Viewed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 32)

        def forward(self, x):
            return torch.relu(self.a(x).t())  # relu reads a view of the linear's output

    recorded = trace(Viewed(), torch.randn(4, 16), training=True)
    addmm, relu = recorded.events[:2]
    assert (addmm.op, relu.op) == ("aten.addmm.default", "aten.relu.default")
    assert relu.reads == addmm.writes  # a view shares its storage's id
    assert len(set(addmm.reads)) == 3 and not set(addmm.reads) & set(addmm.writes)
    assert relu.writes[0] in recorded.saved_ids  # relu keeps its output for backward


def test_a_chain_becomes_one_kernel_of_its_external_traffic():
    recorded = trace(Chain(), torch.randn(4, 16), training=False)
    priced = _priced(recorded)
    assert [e.op.split(".")[1] for e, _ in priced] == [
        "addmm", "gelu", "mul", "add", "native_layer_norm", "addmm",
    ]  # fmt: skip
    compiled, summary = fuse(priced, recorded)
    assert (summary.kernels_before, summary.kernels_after) == (6, 3)  # 4 ops -> 1 kernel
    assert summary.groups == [FusedGroup(("gelu", "mul", "add", "native_layer_norm"), 1)]
    [(event, found)] = _fused_rows(compiled)
    # reads the first linear's output 4*32*4 = 512 and the norm's weight and bias
    # 32*4 = 128 each: 768; writes only the norm's output (512), which the second
    # linear reads: gelu's, mul's and add's outputs stay on chip, and the norm's
    # mean and rstd (inference: nobody reads them) are dropped
    assert found.cost.bytes_read == 512 + 128 + 128
    assert found.cost.bytes_written == 512
    assert found.cost.flops == (8 + 1 + 1 + 8) * 4 * 32  # gelu, mul, add, layer norm per element
    assert found.cost.kernels == 1
    assert event.module == ""  # common path of the model's own ops ("") and "ln"


def test_in_training_a_tensor_saved_for_backward_is_still_written():
    recorded = trace(Chain(), torch.randn(4, 16), training=True)
    compiled, summary = fuse(_priced(recorded), recorded)
    forward, backward = _fused_rows(compiled)
    assert forward[0].phase == "forward" and backward[0].phase == "backward"
    # forward: the same 768 read; written: the add's output (made and consumed inside,
    # but the layer norm saves it) 512, the norm's output 512, its mean and rstd
    # (4 x 1 each, saved) 16 + 16
    assert forward[1].cost.bytes_read == 768
    assert forward[1].cost.bytes_written == 512 + 512 + 16 + 16
    # backward reads them all again; without it, autograd's saved set alone keeps them
    alone, _ = fuse([p for p in _priced(recorded) if p[0].phase == "forward"], recorded)
    assert _fused_rows(alone)[0][1].cost.bytes_written == 512 + 512 + 16 + 16
    # backward, in trace order: the second linear's bias gradient (sum of the
    # 4x8 output gradient: reads 128, writes 8*4 = 32), the layer-norm backward
    # (reads the 512 gradient, the saved 512 input, mean and rstd 16 + 16, weight
    # and bias 128 + 128; its 512 input gradient stays inside, its weight and
    # bias gradients 128 + 128 are written), the *2 (inside), gelu backward
    # (reads the first linear's saved output 512, writes 512 for the matmul after)
    assert backward[0].info["fused"] == (
        "aten.sum.dim_IntList",
        "aten.native_layer_norm_backward.default",
        "aten.mul.Tensor",
        "aten.gelu_backward.default",
    )
    assert backward[1].cost.bytes_read == 128 + 512 + 512 + 16 + 16 + 128 + 128 + 512
    assert backward[1].cost.bytes_written == 32 + 128 + 128 + 512
    # the loss runs outside the compiled model, op by op
    loss_ops = [e.op for e, _ in compiled if e.module == LOSS_MODULE]
    assert loss_ops == [e.op for e in recorded.events if e.module == LOSS_MODULE]
    # forward: one kernel for 4 ops; backward: the bias gradient's sum shares no
    # tensor with the other three (two kernels for 4 ops)
    assert (forward[1].cost.kernels, backward[1].cost.kernels) == (1, 2)
    assert summary.kernels_before - summary.kernels_after == (4 - 1) + (4 - 2)


def test_two_halves_of_one_storage_are_both_read():
    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(16, 64)
            self.down = nn.Linear(32, 8)

        def forward(self, x):
            a, b = self.up(x).chunk(2, dim=-1)  # same shape and strides, offsets 0 and 32
            return self.down(a * torch.sigmoid(b))

    recorded = trace(Gated(), torch.randn(4, 16), training=False)
    compiled, _ = fuse(_priced(recorded), recorded)
    [(_, found)] = _fused_rows(compiled)
    assert found.cost.bytes_read == 2 * 4 * 32 * 4  # both halves of the 4x64 output
    assert found.cost.bytes_written == 4 * 32 * 4


def test_the_models_output_is_written_and_fallbacks_break_chains():
    class Tail(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 32)

        def forward(self, x):
            return torch.relu(self.a(x)) * 2  # nothing reads the product: the output

    recorded = trace(Tail(), torch.randn(4, 16), training=False)
    compiled, _ = fuse(_priced(recorded), recorded)
    [(_, found)] = _fused_rows(compiled)
    assert (found.cost.bytes_read, found.cost.bytes_written) == (512, 512)

    class Sorted(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 32)

        def forward(self, x):
            return torch.sort(torch.relu(self.a(x)), dim=-1).values * 2

    recorded = trace(Sorted(), torch.randn(4, 16), training=False)
    compiled, summary = fuse(_priced(recorded), recorded)
    # Inductor sorts with the eager kernel: relu, sort and mul stay three kernels
    assert (summary.kernels_before, summary.kernels_after, summary.groups) == (4, 4, [])


class ConvBnRelu(nn.Module):
    def __init__(self, residual: bool = False):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.r = nn.ReLU(inplace=True)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.residual = residual

    def forward(self, x):
        y = self.c(x)
        out = self.c2(self.r(self.bn(y)))
        return out + y if self.residual else out


def test_conv_bn_relu_folds_in_inference_only():
    x = torch.randn(2, 3, 8, 8)
    recorded = trace(ConvBnRelu(), x, training=False)
    compiled, summary = fuse(_priced(recorded), recorded)
    # conv, batch norm, relu_, conv: the batch norm and ReLU fold into the first conv
    assert (summary.kernels_before, summary.kernels_after) == (4, 2)
    assert summary.folded == [Fold("c", ("native_batch_norm", "relu_"))]
    assert [e.op for e, _ in compiled] == ["aten.convolution.default"] * 2

    recorded = trace(ConvBnRelu(), x, training=True)
    compiled, summary = fuse(_priced(recorded), recorded)
    assert summary.folded == []
    forward = [e for e, _ in compiled if e.phase == "forward" and e.module != LOSS_MODULE]
    # conv, num_batches_tracked += 1, batch norm, relu_, conv: the middle three fuse
    assert [e.op.split(".")[1] if "." in e.op else e.op for e in forward] == [
        "convolution", "fused: add_+native_batch_norm+relu_", "convolution",
    ]  # fmt: skip
    # ... into two kernels: the counter's increment shares no tensor with the rest
    assert [g.kernels for g in summary.groups if g.ops[0] == "add_"] == [2]


def test_a_conv_output_used_twice_does_not_fold():
    recorded = trace(ConvBnRelu(residual=True), torch.randn(2, 3, 8, 8), training=False)
    _, summary = fuse(_priced(recorded), recorded)
    assert summary.folded == []  # the residual still needs the convolution's own output


def test_spliced_events_get_storage_ids_of_their_own():
    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(64, 256)
            self.head = nn.Linear(256, 1000)

        def forward(self, x):
            return self.head(torch.relu(self.up(x)))

    from dlperf.advice import fixes

    model = Mlp()
    run = resolve(model, torch.empty(8, 64), gpu="a100", precision="fp32")
    session = Session()
    base = session.trace(run)
    spliced = session.trace(run.with_module(fixes.pad_linear_outputs(model, {"head": 1024})))
    assert spliced is not base
    kept = {i for e in spliced.events if e.module != "head" for i in (*e.reads, *e.writes)}
    head = {i for e in spliced.events if e.module == "head" for i in (*e.reads, *e.writes)}
    base_ids = {i for e in base.events for i in (*e.reads, *e.writes)}
    assert head and min(head) > max(base_ids)  # shifted past every id of the base
    assert not kept & head


@pytest.fixture(scope="module")
def resnet18():
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18()


def test_resnet18_training_compiled_runs_fewer_kernels_in_less_time(resnet18):
    recorded = trace(resnet18, torch.randn(32, 3, 224, 224), precision="amp-fp16")
    eager_s, compiled_s, summary = analyze_compiled(recorded, dlperf.gpu("a100"))
    assert summary.kernels_after < summary.kernels_before
    assert compiled_s < eager_s
    # each fused group of n ops in k kernels saves n - k, and nothing folds in training
    saved = sum((len(g.ops) - g.kernels) * g.count for g in summary.groups)
    assert summary.kernels_before - summary.kernels_after == saved
    assert summary.folded == []


def test_resnet18_inference_folds_every_batch_norm(resnet18):
    recorded = trace(resnet18, torch.randn(2, 3, 64, 64), training=False)
    _, summary = fuse(_priced(recorded), recorded)
    # 20 batch norms, each right after its convolution: the stem's and each of the
    # 8 blocks' first are followed by a ReLU (9); the blocks' second (8) feed the
    # residual addition and the 3 downsampling ones feed it too (11 without ReLU)
    assert Counter(f.dropped for f in summary.folded) == {
        ("native_batch_norm", "relu_"): 9,
        ("native_batch_norm",): 11,
    }


class Lookup(nn.Module):
    """An embedding lookup scaled by 2: one fused kernel in inference."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(1000, 64)

    def forward(self, ids):
        return self.table(ids) * 2.0


def test_a_fused_lookup_reads_the_rows_it_gathers_not_the_table():
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    recorded = trace(Lookup(), ids, training=False, precision="fp32")
    compiled, _ = fuse(_priced(recorded), recorded)
    ((event, found),) = _fused_rows(compiled)
    # reads: 16 gathered rows of 64 fp32 (16 x 64 x 4 = 4096 B) and the ids
    # (16 x 8 = 128 B), not the 1000 x 64 x 4 = 256,000 B table; writes the
    # scaled rows (4096 B)
    assert found.cost.bytes_read == 4096 + 128
    assert found.cost.bytes_written == 4096


def test_a_compiled_step_recomputes_point_wise_chains_instead_of_saving_them():
    # issue 23, item 5: eager autograd keeps GPT-2's tanh-GELU intermediates in
    # fp32 under autocast (x, tanh, 1 + tanh, ...) and the bf16 cast of its
    # result for c_proj; Inductor's partitioner keeps c_fc's bf16 output alone
    # and recomputes the rest in backward: B x S x 4H x 2 bytes per block
    from dlperf.run import Session, resolve
    from dlperf.training_memory import partitioned

    batch, seq, hidden = 2, 64, 64
    run = resolve(
        "hf:gpt2:layers=1,hidden=64,heads=2",
        gpu="a100",
        batch=batch,
        seq_len=seq,
        precision="amp-bf16",
    )
    eager = Session().trace(run)
    compiled = partitioned(eager)

    def saved_in(trace, *modules):
        return sum(
            s.nbytes for s in trace.saved if s.kind == "activation" and s.module.endswith(modules)
        )

    gelu = saved_in(eager, "mlp.act", "mlp.c_proj")
    assert gelu > 3 * batch * seq * 4 * hidden * 4  # at least three fp32 intermediates
    assert saved_in(compiled, "mlp.act", "mlp.c_proj") == 0
    c_fc_output = batch * seq * 4 * hidden * 2
    assert saved_in(compiled, "mlp.c_fc") == saved_in(eager, "mlp.c_fc") + c_fc_output
    assert compiled.activation_bytes == eager.activation_bytes - gelu + c_fc_output
    # the memory verb and the analysis's verdict read the same saved set
    common = dict(gpu="a100", batch=batch, seq_len=seq, precision="amp-bf16")
    plain = dlperf.memory("hf:gpt2:layers=1,hidden=64,heads=2", **common)
    fused = dlperf.memory("hf:gpt2:layers=1,hidden=64,heads=2", compile=True, **common)
    assert plain.activations_bytes - fused.activations_bytes == gelu - c_fc_output
