"""Training memory: the seeds' per-parameter bytes, saved activations
against PyTorch's own, Korthikanti et al.'s formula, checkpointing."""

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

import dlperf
from dlperf.errors import DlperfError
from dlperf.precision import POLICIES
from dlperf.tracing import trace
from dlperf.training_memory import optimizer_bytes, parse_checkpoint, state_bytes_per_param

sys.path.insert(0, str(Path(__file__).parent))
from gpt_layer import GPT  # noqa: E402


def test_seed_bytes_per_parameter():
    # fp32 training: 4 B weights + 4 B gradients
    assert state_bytes_per_param("fp32") == (4, 4)
    assert state_bytes_per_param("tf32") == (4, 4)
    # mixed precision: fp32 master + half copy = 6 B, fp32 gradients = 4 B
    assert state_bytes_per_param("amp-fp16") == (6, 4)
    assert state_bytes_per_param("amp-bf16") == (6, 4)
    assert state_bytes_per_param("bf16") == (2, 2)
    n = 1000
    assert optimizer_bytes("adamw", n, []) == 8 * n  # two fp32 moments
    assert optimizer_bytes("sgd-momentum", n, []) == 4 * n  # one state
    assert optimizer_bytes("adam8bit", n, []) == 2 * n  # two 8-bit states
    assert optimizer_bytes("sgd", n, []) == 0
    # Adafactor: a 300x200 matrix keeps 300 + 200 fp32 values, a 50-vector 50
    assert optimizer_bytes("adafactor", 60050, [(300, 200), (50,)]) == 4 * (500 + 50)


def real_saved_bytes(model, x) -> int:
    """What PyTorch itself saves for backward on real CPU tensors (one count per
    storage; parameters and buffers are weights, not activations)."""
    state = {StorageWeakRef(t.untyped_storage()) for t in [*model.parameters(), *model.buffers()]}
    saved = {}

    def pack(t):
        key = StorageWeakRef(t.untyped_storage())
        if key not in state:
            saved.setdefault(key, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
        nn.functional.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long))
    return sum(saved.values())


def test_saved_activations_equal_what_pytorch_saves():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    assert trace(model, x, precision="fp32").activation_bytes == real_saved_bytes(model, x)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10))
    x = torch.randn(8, 32)
    assert trace(mlp, x, precision="fp32").activation_bytes == real_saved_bytes(mlp, x)


def test_gpt_layer_activations_match_korthikanti():
    # Korthikanti et al. 2022, no recomputation, 16-bit: 34 s b h + 5 a s^2 b bytes per layer.
    s, b, h, a = 512, 4, 1024, 16
    with torch.device("meta"):
        model = GPT(layers=2, hidden=h, heads=a)
    t = trace(model, torch.empty(s, b, h, device="meta"), precision="fp16")
    per_layer = sum(x.nbytes for x in t.saved if x.module.startswith("layers.0"))
    formula = 34 * s * b * h + 5 * a * s * s * b  # 71.3e6 + 83.9e6 = 155.2e6
    assert per_layer == pytest.approx(formula, rel=0.10)
    # The only extra is the two layer norms' mean and rstd (s b values each, 2 or 4
    # bytes), which the paper leaves out as too small. Dropout masks count one byte
    # per element, as CUDA stores them (the CPU kernels store the data dtype).
    assert 0 < per_layer - formula <= 2 * 2 * s * b * 4


def test_checkpointing_keeps_block_inputs_only():
    s, b, h, a = 128, 2, 256, 4
    with torch.device("meta"):
        model = GPT(layers=4, hidden=h, heads=a)
    x = torch.empty(s, b, h, device="meta")
    none = dlperf.memory(model, x, precision="fp16", checkpoint="none")
    blocks = dlperf.memory(model, x, precision="fp16", checkpoint="blocks")
    every2 = dlperf.memory(model, x, precision="fp16", checkpoint="every:2")
    per_layer = none.activations_bytes / 4
    # blocks: 4 layer inputs (2 s b h bytes each) + one layer's activations, recomputed
    assert blocks.activations_bytes == pytest.approx(4 * 2 * s * b * h + per_layer)
    # every:2: 2 segment inputs + two layers' activations
    assert every2.activations_bytes == pytest.approx(2 * 2 * s * b * h + 2 * per_layer)
    assert blocks.recompute_s > 0 and none.recompute_s == 0
    assert blocks.peak_bytes < none.peak_bytes


def test_memory_report_and_fit():
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))
    x = torch.empty(64, 1024, device="meta")
    r = dlperf.memory(model, x, gpu="t4", precision="fp32", optimizer="adamw", fit=True)
    n = 1024 * 4096 + 4096 + 4096 * 1024 + 1024  # 8,393,728 parameters
    assert r.params == n
    assert (r.weights_bytes, r.gradients_bytes, r.optimizer_bytes) == (4 * n, 4 * n, 8 * n)
    doc = r.to_dict()
    for key in (
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "overhead_bytes",
        "peak_bytes",
        "peak_phase",
        "fits",
        "max_batch",
        "by_module",
    ):
        assert key in doc
    assert r.fits and r.max_batch > 64
    bigger = dlperf.memory(
        model, torch.empty(r.max_batch + 1, 1024, device="meta"), gpu="t4", precision="fp32"
    )
    assert not bigger.fits


def test_accumulation_shrinks_activations_not_gradients():
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    x = torch.empty(64, 256, device="meta")
    one = dlperf.memory(model, x, precision="fp32")
    four = dlperf.memory(model, x, precision="fp32", accumulate=4)
    assert four.micro_batch == 16
    # a quarter, up to the loss's few scalar bytes that do not scale with the batch
    assert four.activations_bytes == pytest.approx(one.activations_bytes / 4, rel=1e-3)
    assert four.gradients_bytes == one.gradients_bytes
    with pytest.raises(DlperfError, match="must divide the batch"):
        dlperf.memory(model, x, accumulate=5)


def test_bad_memory_options():
    with pytest.raises(DlperfError, match="unknown checkpoint policy"):
        parse_checkpoint("every:zero")
    with pytest.raises(DlperfError, match="unknown optimizer"):
        dlperf.memory(nn.Linear(2, 2), torch.empty(1, 2), optimizer="lion")


def test_fit_offers_no_sequence_longer_than_the_position_table():
    # GPT-2 learns 1024 positions; a 2-layer copy at batch 1 fits far longer
    # sequences in 80 GiB, so only the position table can stop the search
    r = dlperf.memory(
        "hf:gpt2:layers=2", gpu="a100", precision="amp-bf16", batch=1, seq_len=128, fit=True
    )
    assert r.max_seq_len == 1024
    # issue 36, item 14: the report said "largest sequence 1024" without saying why
    assert r.max_seq_len_position_limit == 1024
    from rich.console import Console

    from dlperf.rendering.terminal.memory import memory_report

    console = Console(record=True, width=200)
    memory_report(r, console=console)
    assert "1024 (the model's position limit" in console.export_text()


def test_framework_memory_is_spec_data_per_family():
    # cuBLAS's workspace is 32 MiB on Hopper and 4 MiB before (hardware/specs/
    # _framework_memory.toml); the rest of the overhead depends on the trace only.
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    x = torch.empty(16, 256, device="meta")
    ampere = dlperf.memory(model, x, gpu="a100", precision="fp32")
    hopper = dlperf.memory(model, x, gpu="h100", precision="fp32")
    assert hopper.overhead_bytes - ampere.overhead_bytes == (32 - 4) * 2**20
    # a CPU has no CUDA context, no cuBLAS workspace and no CUDA caching allocator
    cpu = dataclasses.replace(dlperf.gpu("a100"), kind="cpu", architecture="cpu")
    on_cpu = dlperf.memory(model, x, gpu=cpu, precision="fp32")
    assert on_cpu.overhead_bytes == on_cpu.allocator_bytes == 0
    assert on_cpu.peak_bytes == on_cpu.allocated_bytes


def test_state_bytes_come_from_the_precision_value():
    for name, policy in POLICIES.items():
        assert state_bytes_per_param(policy) == state_bytes_per_param(name)
    # pure bf16 training keeps AdamW's two moments in the weights' 2-byte dtype
    model = nn.Linear(64, 64)
    n = 64 * 64 + 64
    r = dlperf.memory(model, torch.empty(4, 64, device="meta"), precision="bf16")
    assert (r.weights_bytes, r.gradients_bytes, r.optimizer_bytes) == (2 * n, 2 * n, 2 * 2 * n)


def test_checkpointing_what_ifs_are_the_runs_they_name():
    with torch.device("meta"):
        model = GPT(layers=4, hidden=128, heads=4)
    x = torch.empty(64, 2, 128, device="meta")
    none = dlperf.memory(model, x, precision="fp16")
    blocks = dlperf.memory(model, x, precision="fp16", checkpoint="blocks")
    what_if = {p.checkpoint: p for p in none.policies}
    assert set(what_if) == {"none", "selective", "selective-op", "full", "sqrt"}
    assert blocks.checkpoint == "full"  # blocks is full's alias
    assert what_if["full"].peak_bytes == blocks.peak_bytes
    assert what_if["full"].activations_bytes == blocks.activations_bytes
    assert what_if["none"].peak_bytes == none.peak_bytes
    # the peak is the largest of the three phases with the allocator's reserve
    # on top, and the JSON says which phase
    assert none.peak_bytes == max(none.phases.values()) + none.allocator_bytes
    assert none.to_dict()["peak_phase"] == none.peak_phase == max(none.phases, key=none.phases.get)


def test_activations_by_module_follow_the_checkpointing():
    # issue 21, item 5: under --checkpoint full the per-module table showed the activations
    # saved without checkpointing (3 GiB in the blocks) under a total of 1.2 GiB. Now each
    # table adds up to its policy's activations: the blocks keep their inputs, and one
    # segment's activations come back in backward
    from dlperf.checkpointing import RECOMPUTED

    model = "hf:gpt2:layers=4,hidden=128,heads=4"
    plain = dlperf.memory(model, gpu="a100", batch=4)
    for policy in ("none", "full", "selective", "every:2"):
        m = dlperf.memory(model, gpu="a100", batch=4, checkpoint=policy)
        assert sum(m.by_module.values()) == m.activations_bytes, policy
    full = dlperf.memory(model, gpu="a100", batch=4, checkpoint="full")
    assert full.by_module["transformer.h"] < plain.by_module["transformer.h"]
    assert RECOMPUTED in full.by_module and RECOMPUTED not in plain.by_module


def test_selective_op_saves_every_other_linear_and_the_attention_output():
    # torchtitan's per-op policy (issue 23, item 2) on a tiny Llama in fp32 (no casts):
    # batch 1 x 8 tokens, hidden 64, 4 heads of 16, MLP 128. A block's linear GEMMs run
    # q, k, v, o, gate, up, down: the 1st, 3rd, 5th and 7th are saved: q (8 x 64 x 4 B =
    # 2048), v (2048), gate (8 x 128 x 4 = 4096), down (2048); and the attention kernel's
    # output (4 x 8 x 16 x 4 = 2048) and log-sum-exp (4 x 8 x 4 = 128): 12416 bytes
    from dlperf.checkpointing import checkpoint_plan, op_saved, op_saved_bytes
    from dlperf.run import Session, resolve

    model = "hf:llama:layers=2,hidden=64,heads=4,kv_heads=4,mlp=128,vocab=100"
    run = resolve(model, gpu="a100", precision="fp32", batch=1, seq_len=8)
    trace = Session().trace(run)
    block = trace.blocks[0]
    names = [trace.events[i].module.rsplit(".", 1)[-1] for i in op_saved(trace)[block]]
    assert names == ["q_proj", "v_proj", "self_attn", "gate_proj", "down_proj"]
    assert op_saved_bytes(trace)[block] == 2048 + 2048 + 4096 + 2048 + 2048 + 128
    # what forward keeps: per block its input (8 x 64 x 4 = 2048) and those outputs; one
    # block's other activations come back in backward; selective-op lies between
    none, full = (checkpoint_plan(trace, p).activations_bytes for p in ("none", "full"))
    op = checkpoint_plan(trace, "selective-op").activations_bytes
    assert full < op < none
    assert op - full == 2 * 12416 - 12416  # kept twice over, one block's fewer recomputed
    # the memory report says what each policy frees, and flags one that frees little
    report = dlperf.memory(model, gpu="a100", precision="fp32", batch=1, seq_len=8)
    shares = {p.checkpoint: p.frees_share for p in report.policies}
    assert shares["none"] == 0 and shares["full"] > shares["selective-op"] > 0
