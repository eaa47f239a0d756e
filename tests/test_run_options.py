"""The ways a step runs (--attention, --checkpoint, --compile, --cuda-graphs,
--clip-grad, fp8) on every verb that takes a model, and what each changes in the result."""

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.cli import main
from dlperf.hardware.framework import framework_host
from dlperf.kernels.fixed_costs import gap_s
from dlperf.kernels.host import issue_timeline
from dlperf.run import Session, resolve
from dlperf.tracing import trace

TINY = "hf:gpt2:layers=2,n_embd=64,n_head=4,vocab_size=512,n_positions=64"
WAYS = ["--attention", "eager", "--checkpoint", "full", "--compile", "--cuda-graphs", "--clip-grad"]


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("verb", ["analyze", "memory", "advise", "plan"])
def test_every_model_verb_takes_the_run_options(capsys, verb):
    extra = ["--gpus", "2"] if verb == "plan" else []
    doc = run_json(
        capsys, verb, TINY, "--gpu", "a100", "--batch", "2", "--seq-len", "32", *WAYS, *extra
    )
    assert doc


def test_report_takes_the_run_options(capsys, tmp_path):
    out = tmp_path / "r.html"
    doc = run_json(
        capsys, "report", TINY, "--gpu", "a100", "--batch", "2", *WAYS, "--out", str(out)
    )
    assert doc["out"] == str(out) and out.stat().st_size > 0


def test_measure_refuses_what_it_cannot_run(capsys):
    code = main(["measure", TINY, "--compile"])
    _, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "--compile" in err


def test_checkpoint_full_recomputes_the_blocks_forward(capsys):
    base = ["analyze", TINY, "--gpu", "a100", "--batch", "2", "--seq-len", "32"]
    plain = run_json(capsys, *base)
    full = run_json(capsys, *base, "--checkpoint", "full")
    assert "recompute" not in plain["phases"] and full["checkpoint"] == "full"
    # every forward op inside the two blocks runs again; what lies outside
    # them (embeddings, final norm, head, loss) does not
    block_forward = sum(
        op["flops"]
        for op in plain["ops"]
        if op["phase"] == "forward" and op["module"].startswith("transformer.h.")
    )
    assert full["phases"]["recompute"]["flops"] == pytest.approx(block_forward)
    assert full["step_time_s"] > plain["step_time_s"]


def test_compile_fuses_kernels_and_reports_them(capsys):
    base = ["analyze", TINY, "--gpu", "a100", "--batch", "2", "--seq-len", "32"]
    eager = run_json(capsys, *base)
    compiled = run_json(capsys, *base, "--compile")
    fusion = compiled["compile"]
    assert eager["compile"] is None

    def step_kernels(doc):  # the optimizer runs eager after the compiled graphs
        return sum(op["kernels"] for op in doc["ops"] if op["phase"] != "optimizer")

    assert fusion["kernels_before"] == step_kernels(eager)
    assert fusion["kernels_after"] == step_kernels(compiled) < fusion["kernels_before"]
    # the report's side-by-side: the unfused step as `analyze` without --compile prices it
    assert fusion["eager_step_s"] == pytest.approx(eager["step_time_s"])
    assert compiled["step_time_s"] < eager["step_time_s"]


def test_step_time_holds_the_host_and_cuda_graphs_remove_it(capsys):
    # batch 1 x 8 tokens of a tiny model: every kernel is shorter than its launch
    base = ["analyze", TINY, "--gpu", "h100", "--batch", "1", "--seq-len", "8"]
    eager = run_json(capsys, *base)
    graphs = run_json(capsys, *base, "--cuda-graphs")
    assert eager["step_time_s"] > eager["totals"]["time_s"]  # the GPU waits for the host
    assert eager["host"]["idle_s"] > 0
    assert graphs["host"]["idle_s"] < eager["host"]["idle_s"]
    assert graphs["step_time_s"] < eager["step_time_s"]


def test_attention_choice_is_said(capsys):
    doc = run_json(capsys, "analyze", TINY, "--gpu", "a100", "--batch", "2", "--seq-len", "32")
    notes = {n for op in doc["ops"] if op["family"] == "attention" for n in op["notes"]}
    assert any(n.startswith("attention: flash") for n in notes)


class Scores(nn.Module):
    def forward(self, x):
        return torch.softmax(x @ x.transpose(-1, -2), dim=-1)


def _softmax_dtype(autocast_device: str) -> torch.dtype:
    x = torch.empty(2, 16, 16, device="meta")
    recorded = trace(
        Scores(), x, training=False, precision="amp-fp16", autocast_device=autocast_device
    )
    return next(e.outputs[0].dtype for e in recorded.events if "softmax" in e.op)


def test_cuda_autocast_runs_softmax_in_float32():
    # torch.amp's documented CUDA list runs softmax in float32; CPU autocast
    # leaves it in the input's half precision
    assert _softmax_dtype("cuda") == torch.float32
    assert _softmax_dtype("cpu") == torch.float16


def test_fp16_amp_steps_run_the_grad_scaler_and_wait_for_it():
    session = Session()
    fp16 = session.analysis(resolve(TINY, gpu="a100", precision="amp-fp16", batch=2, seq_len=32))
    bf16 = session.analysis(resolve(TINY, gpu="a100", precision="amp-bf16", batch=2, seq_len=32))
    scaler = [r for r in fp16.rows if r.op == "amp.grad_scaler"]
    assert len(scaler) == 1 and scaler[0].host_sync
    assert not [r for r in bf16.rows if r.op == "amp.grad_scaler"]
    # unscale reads and writes every fp32 gradient once: 2 x 4 B per parameter
    assert scaler[0].bytes == pytest.approx(8 * fp16.params, rel=0.01)


def test_clip_grad_norm_reads_every_gradient_twice_and_writes_it_once(capsys):
    from dlperf.optimizer import clip_grad_cost

    session = Session()
    base = resolve(TINY, gpu="a100", precision="amp-bf16", batch=2, seq_len=32)
    plain = session.analysis(base)
    clipped = session.analysis(resolve(TINY, gpu="a100", precision="amp-bf16", batch=2,
                                       seq_len=32, clip_grad=True))  # fmt: skip
    rows = [r for r in clipped.rows if r.op == "clip_grad_norm"]
    assert len(rows) == 1 and rows[0].phase == "optimizer"
    assert not [r for r in plain.rows if r.op == "clip_grad_norm"]
    # the norms read each fp32 gradient, the multiply reads and writes it: 3 x 4 B each
    assert rows[0].bytes == pytest.approx(12 * clipped.params, rel=0.01)
    # nothing waits on it: the coefficient is clamped on the device
    assert not rows[0].host_sync
    assert clipped.time_s > plain.time_s
    # how PyTorch runs it: one foreach op per pass from 2.0 (this tiny model's
    # gradients fit one launch each: _foreach_norm, its finishing kernel,
    # _foreach_mul_, and the 5 scalar ops between), a loop over them before
    trace = session.trace(base)
    tensors = len([s for s in trace.param_shapes if s])
    event, costed = clip_grad_cost(trace, dlperf.gpu("a100", torch_version="2.4"))
    assert (costed.cost.kernels, event.info["host_ops"]) == (2 + 1 + 5, 2 + 5)
    old = dlperf.gpu("a100", torch_version="1.12")
    event, costed = clip_grad_cost(trace, old)
    assert costed.cost.kernels == event.info["host_ops"] == 2 * tensors + 5
    # torch.optim's AdamW likewise: its 8 passes as foreach ops from 2.0, per tensor before
    update = session.analysis(resolve(TINY, gpu=old, precision="amp-bf16", batch=2, seq_len=32))
    (step,) = [r for r in update.rows if r.op == "optimizer.adamw"]
    assert step.kernels == step.host_ops == 8 * tensors
    # an inference pass has no gradients to clip; measure runs the step as written
    for argv in (["analyze", TINY, "--infer"], ["measure", TINY]):
        assert main([*argv, "--clip-grad"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--clip-grad" in err


def test_zero_grad_zeroes_each_gradient_before_pytorch_2_only():
    session = Session()
    kw = dict(precision="amp-bf16", batch=2, seq_len=32)
    old = session.analysis(resolve(TINY, gpu=dlperf.gpu("a100", torch_version="1.12"), **kw))
    new = session.analysis(resolve(TINY, gpu=dlperf.gpu("a100", torch_version="2.4"), **kw))
    shapes = session.trace(resolve(TINY, gpu="a100", **kw)).param_shapes
    tensors = sum(1 for s in shapes if math.prod(s) > 0)
    (zero,) = [r for r in old.rows if r.op == "zero_grad"]
    # before 2.0 zero_grad() zeroes every gradient in place: one fill kernel and one
    # framework call per parameter, writing each fp32 gradient once (4 B a parameter)
    assert zero.phase == "optimizer" and zero.kernels == zero.host_ops == tensors
    assert zero.bytes == pytest.approx(4 * old.params, rel=0.01)
    assert not zero.host_sync
    # from 2.0 it sets them to None: nothing runs
    assert not [r for r in new.rows if r.op == "zero_grad"]
    # an inference pass has no gradients
    infer = session.analysis(resolve(TINY, gpu=dlperf.gpu("a100", torch_version="1.12"),
                                     training=False, **kw))  # fmt: skip
    assert not [r for r in infer.rows if r.op == "zero_grad"]


def test_channels_last_runs_the_convolutions_nhwc_on_a_copy():
    import torchvision

    from dlperf.models import build_without_weights

    model = build_without_weights(torchvision.models.resnet18)
    x = torch.zeros(8, 3, 64, 64, device="meta")
    kw = dict(gpu="v100-sxm2-16gb", precision="amp-fp16", optimizer="sgd-momentum")
    nchw = dlperf.analyze(model, x, **kw)
    nhwc = dlperf.analyze(model, x, channels_last=True, **kw)
    convs = [r for r in nhwc.rows if r.op.startswith("aten.convolution")]
    assert convs and {r.layout for r in convs} == {"NHWC"}
    assert {r.layout for r in nchw.rows if r.op.startswith("aten.convolution")} == {"NCHW"}
    # no Tensor Core transposes on the way in and out: the step is faster
    assert nhwc.time_s < nchw.time_s
    # the caller's model and inputs keep their layout
    assert model.conv1.weight.is_contiguous() and x.is_contiguous()
    with pytest.raises(dlperf.DlperfError, match="4-D image tensors"):
        resolve(TINY, gpu="a100", channels_last=True)


class _Row:
    def __init__(self, time_s, phase="forward", host_sync=False):
        self.time_s, self.phase, self.host_sync = time_s, phase, host_sync
        self.kernels, self.host_ops = 1, 1


def test_a_sync_makes_the_host_wait_for_the_gpu():
    a100 = dlperf.gpu("a100")
    host = framework_host(a100.architecture)
    issue = host.eager_op_host_s + host.kernel_launch_host_s
    long, short = 1e-3, 1e-9
    rows = [_Row(long), _Row(short, "optimizer")]
    free = issue_timeline(rows, a100)
    synced = issue_timeline([_Row(long, host_sync=True), _Row(short, "optimizer")], a100)
    # without a sync the second op is issued while the first runs and starts the
    # stream's gap after it: step = issue + long + gap + short
    gap = gap_s(a100)
    assert free.step_s == pytest.approx(issue + long + gap + short)
    # with one the host waits for the first to end, then issues the second:
    # step = issue + long + issue + short
    assert synced.step_s == pytest.approx(2 * issue + long + short)


def test_seq_len_resizes_a_model_files_token_inputs():
    # --seq-len is refused only where no token tensor could take it (issue 21): a model
    # file whose factory returns token ids takes it, at its own length or another
    from dlperf.run import resolve

    path = str(Path(__file__).resolve().parents[1] / "examples" / "decoder.py") + ":model"
    for seq in (512, 64):
        run = resolve(path, gpu="a100", batch=2, seq_len=seq)
        assert tuple(run.inputs[0].shape if isinstance(run.inputs, tuple) else
                     run.inputs.shape) == (2, seq)  # fmt: skip


def test_plan_prices_clipping_and_keeps_channels_last():
    import torchvision

    from dlperf.models import build_without_weights

    fixed = dict(gpu="a100", gpus=2, micro_batch=2, seq_len=32, dp=2, tp=1, pp=1, sharding="none")
    plain, clipped = (dlperf.plan(TINY, clip_grad=c, **fixed).plans[0] for c in (False, True))
    # the same layout, its compute longer by the clipping in the optimizer step
    assert plain.name == clipped.name and clipped.compute_time_s > plain.compute_time_s
    model = build_without_weights(torchvision.models.resnet18)
    x = torch.zeros(32, 3, 224, 224, device="meta")  # large enough for the transposes to show
    kw = dict(gpu="v100-sxm2-16gb", precision="amp-fp16", optimizer="sgd-momentum", gpus=2)
    kw |= dict(dp=2, tp=1, pp=1, sharding="none")
    nchw, nhwc = (dlperf.plan(model, x, channels_last=c, **kw).plans[0] for c in (False, True))
    # the plan's profile traces NHWC inputs as given: no Tensor Core transposes
    assert nhwc.compute_time_s < nchw.compute_time_s


def test_frozen_parameters_get_no_optimizer_launches():
    # a frozen backbone (LoRA-style fine-tuning): the optimizer loops over the trainable
    # tensors only, and zero_grad and clipping likewise
    from torch import nn

    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 8))
    for p in model[0].parameters():
        p.requires_grad_(False)
    x = torch.empty(4, 64, device="meta")
    old = dlperf.gpu("a100", torch_version="1.12")  # loops over tensors before 2.0
    a = dlperf.analyze(model, x, gpu=old, precision="fp32", optimizer="adamw-hf", clip_grad=True)
    rows = {r.op: r for r in a.rows if r.phase == "optimizer"}
    # 2 trainable layers x (weight, bias) = 4 tensors of the 6
    assert rows["zero_grad"].kernels == 4
    assert rows["clip_grad_norm"].kernels == 2 * 4 + 5  # a norm and a multiply each, 5 scalars
    for p in model[0].parameters():
        p.requires_grad_(True)
    whole = dlperf.analyze(model, x, gpu=old, precision="fp32", optimizer="adamw-hf")
    (update,) = [r for r in whole.rows if r.op == "optimizer.adamw-hf"]
    # the same passes per tensor over 4 tensors of the 6
    assert rows["optimizer.adamw-hf"].kernels * 6 == update.kernels * 4
    # and the states: Adafactor's factored moments follow the trainable shapes only
    for p in model[0].parameters():
        p.requires_grad_(False)
    mem = dlperf.memory(model, x, gpu="a100", precision="fp32", optimizer="adafactor")
    # 64 x 64 keeps 64 + 64, 64 x 8 keeps 64 + 8, each bias its 64 or 8: 4 B each
    assert mem.optimizer_bytes == 4 * ((64 + 64) + 64 + (64 + 8) + 8)
