"""Parallelism plans, the ring model and real collectives under torchrun."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.api import plan
from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.parallel import (
    RING_STEP_LATENCY_S,
    Interconnect,
    Layout,
    ModelProfile,
    interconnect_for,
    parse_schedule,
    price,
    ring_time_s,
)
from dlperf.precision import POLICIES

sys.path.insert(0, str(Path(__file__).parent))
from gpt_layer import GPT  # noqa: E402


def test_ring_collective_volumes():
    # 8 ranks, 1 GB at 100 GB/s, no latency: all-reduce moves 2*7/8 GB, all-gather 7/8 GB
    assert ring_time_s("all_reduce", 1e9, 8, 100e9, latency=0) == pytest.approx(2 * 7 / 8 / 100)
    assert ring_time_s("all_gather", 1e9, 8, 100e9, latency=0) == pytest.approx(7 / 8 / 100)
    assert ring_time_s("reduce_scatter", 1e9, 8, 100e9, latency=0) == pytest.approx(7 / 8 / 100)
    assert ring_time_s("all_reduce", 1e9, 1, 100e9) == 0.0


def _profile(**changes) -> ModelProfile:
    base = dict(
        name="m",
        params=1_000_000_000,
        block_params=1_000_000_000,
        blocks=10,
        micro_batch=1,
        tokens_per_sample=0,
        precision="amp-bf16",
        optimizer="adamw",
        block_activations_bytes=1e8,
        boundary_elements=5e6,
        block_forward_s=0.01,
        block_backward_s=0.02,
        block_split_share=1.0,
        optimizer_s=0.01,
    )
    base.update(changes)
    return ModelProfile(**base)


def test_plan_terms_move_the_right_way():
    spec = dlperf.gpu("a100")
    net = Interconnect(300e9, 25e9, 5e-6, 8)
    p = _profile()
    ddp = price(p, spec, net, Layout(dp=8, tp=1, pp=1, micro_batches=8))
    z3 = price(p, spec, net, Layout(dp=8, tp=1, pp=1, sharding="fsdp", micro_batches=8))
    assert z3.memory_per_gpu_bytes < ddp.memory_per_gpu_bytes
    assert ddp.collective("dp all_reduce") and z3.collective("dp all_gather")
    tp = price(p, spec, net, Layout(dp=1, tp=8, pp=1, micro_batches=64))
    assert tp.collective("tp all_reduce")["bytes"] > 0  # still readable as a dict
    assert tp.memory_per_gpu_bytes < ddp.memory_per_gpu_bytes
    # pipeline: m stage slots plus the bubble, (p - 1) of them, and the optimizer
    # on a quarter of the parameters: 10/4 blocks -> 3 on the busiest stage
    at = Layout(dp=1, tp=1, pp=4, schedule=parse_schedule("1f1b"), micro_batches=8)
    pp = price(p, spec, net, at)
    stage = 3 * (0.01 + 0.02)
    assert pp.compute_time_s == pytest.approx((8 + 3) * stage + 0.01 / 4)
    assert pp.bubble_time_s == pytest.approx(3 * stage)


def _gpt(layers=4, hidden=256, heads=4):
    with torch.device("meta"):
        return GPT(layers=layers, hidden=hidden, heads=heads)


X = torch.empty(64, 2, 256, device="meta")  # (s, b, h): 64 "samples" per micro-batch


def test_plan_ranks_only_fitting_plans_and_reports_each_layout_once():
    r = plan(_gpt(), X, gpu="a100", gpus=8, precision="fp16", global_batch=512)
    fitting = [p for p in r.plans if p.fits]
    assert r.plans[: len(fitting)] == fitting  # fitting ones first
    assert fitting == sorted(fitting, key=lambda p: p.step_time_s)
    assert {p.dp * p.tp * p.pp * p.cp for p in r.plans} == {8}
    layouts = [(p.dp, p.tp, p.pp, p.cp, p.ep, p.sharding) for p in r.plans]
    assert len(layouts) == len(set(layouts))
    assert r.searched > len(r.plans)  # schedules, SP and checkpointing variants
    doc = r.to_dict()["plans"][0]
    for key in (
        *("dp", "tp", "pp", "cp", "ep", "zero", "sharding", "schedule", "micro_batch"),
        *("checkpoint", "sequence_parallel", "fits", "memory_per_gpu_bytes", "step_time_s"),
        *("tokens_per_s_per_gpu", "mfu", "accumulate", "samples_per_s", "collectives"),
    ):
        assert key in doc
    for c in doc["collectives"]:
        assert {"op", "bytes", "time_s", "exposed_time_s"} <= set(c)


def test_when_nothing_fits_the_nearest_plans_say_what_would_make_them_fit():
    model, x = _gpt(layers=8, hidden=1024, heads=16), torch.empty(128, 16, 1024, device="meta")
    run = dict(precision="fp16", global_batch=1024, checkpoint="none")
    roomy = plan(model, x, gpu="a100", gpus=8, **run)
    least = min(p.memory_per_gpu_bytes for p in roomy.plans)
    # a GPU 16 MiB short of the leanest plan
    small = dataclasses.replace(dlperf.gpu("a100"), memory_bytes=int(least) - 2**24)
    r = plan(model, x, gpu=small, gpus=8, **run)
    assert not any(p.fits for p in r.plans)
    assert r.note.startswith("no plan fits: the nearest needs") and "\n" not in r.note
    nearest = r.plans[0]
    assert nearest.memory_per_gpu_bytes == least
    assert any(fix.startswith("--checkpoint full") for fix in nearest.to_fit)
    # forced: that plan, how far it is from fitting, and its remedies; on a GPU
    # short of half its activations, checkpointing or half the micro-batch fits
    dims = dict(dp=8, tp=1, pp=1, sharding="fsdp")
    (whole,) = plan(model, x, gpu="a100", gpus=8, **dims, **run).plans
    room = int(whole.memory_per_gpu_bytes - whole.memory.activations_bytes / 2)
    short = dataclasses.replace(dlperf.gpu("a100"), memory_bytes=room)
    forced = plan(model, x, gpu=short, gpus=8, **dims, **run)
    (p,) = forced.plans
    assert forced.note.startswith("dp8-tp1-pp1-fsdp does not fit: the nearest needs")
    over = (p.memory_per_gpu_bytes - room) / 2**30
    assert f"{over:.1f} GiB more than" in forced.note
    assert p.to_fit[0].startswith("--checkpoint full")
    assert p.to_fit[1].startswith("--micro-batch 64")  # half of 128 (activations scale)


def test_forced_dimensions_price_exactly_that_plan():
    r = plan(
        _gpt(), X, gpu="a100", gpus=8, precision="fp16", global_batch=512,
        dp=2, tp=2, pp=2, sharding="zero1", schedule="1f1b", sequence_parallel=True,
        checkpoint="full",
    )  # fmt: skip
    (p,) = r.plans
    assert (p.dp, p.tp, p.pp, p.sharding, p.schedule) == (2, 2, 2, "zero1", "1f1b")
    assert p.sequence_parallel and p.checkpoint == "full" and p.accumulate == 512 // 2 // 64
    assert p.collective("pp send") and p.collective("tp all_gather+reduce_scatter")
    with pytest.raises(DlperfError, match="dp x tp x pp x cp = 24, not the 8 GPUs"):
        plan(_gpt(), X, gpu="a100", gpus=8, precision="fp16", dp=2, tp=3, pp=4)
    with pytest.raises(DlperfError, match="tp 8 does not divide the 12 attention heads"):
        plan("hf:gpt2:n_layer=2", gpu="a100", gpus=8, seq_len=64, tp=8)  # Megatron splits heads
    with pytest.raises(DlperfError, match="interleaved"):
        plan(_gpt(), X, gpu="a100", gpus=8, precision="fp16", pp=4, schedule="interleaved:3")


def test_plan_on_the_command_line(capsys):
    code = main(
        ["plan", "hf:gpt2:n_layer=2", "--seq-len", "128", "--gpu", "h100", "--gpus", "16",
         "--tp", "2", "--cp", "2", "--pp", "2", "--schedule", "gpipe", "--sequence-parallel",
         "--sharding", "zero1", "--json"]
    )  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    (p,) = doc["plans"]
    assert (p["dp"], p["tp"], p["cp"], p["pp"], p["schedule"]) == (2, 2, 2, 2, "gpipe")
    assert doc["fixed"]["sequence_parallel"] is True


def test_measure_comm_with_two_gloo_workers(capsys, tmp_path):
    out = tmp_path / "interconnect.json"
    code = main(
        [
            "measure-comm",
            "--nproc",
            "2",
            "--sizes",
            "65536,1048576",
            "--repeats",
            "2",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    reduces = [c for c in doc["collectives"] if c["op"] == "all_reduce"]
    assert len(reduces) == 2
    assert all(c["bus_bandwidth_bytes_per_s"] > 0 and c["time_s"] > 0 for c in reduces)
    assert json.loads(out.read_text())["bandwidth_bytes_per_s"] > 0


def test_interconnect_defaults_come_from_the_spec_data():
    # hardware/specs/_interconnect.toml: a node's 8 x 200 Gb/s InfiniBand shared
    # by its GPUs, and PCIe 3.0 x16 (16 GB/s) where a spec names no link at all
    bare = dataclasses.replace(
        dlperf.gpu("a100"), nvlink_bandwidth_bytes_per_s=None, pcie_bandwidth_bytes_per_s=None
    )
    net = interconnect_for(bare, gpus_per_node=8)
    assert net.intra_node_bytes_per_s == 16e9
    assert net.inter_node_bytes_per_s == min(16e9, 8 * 200e9 / 8 / 8)  # 25 GB/s per GPU
    assert net.latency_s == RING_STEP_LATENCY_S > 0


def test_a_policy_name_and_its_precision_price_the_same_plan():
    spec = dlperf.gpu("a100")
    net = Interconnect(300e9, 25e9, 5e-6, 8)
    at = Layout(dp=8, tp=1, pp=1, sharding="zero1", micro_batches=8)
    for name, policy in POLICIES.items():
        by_name = price(_profile(precision=name), spec, net, at)
        assert by_name == price(_profile(precision=policy), spec, net, at)
    # ZeRO's weight all-gather moves the 16-bit copy under mixed precision, fp32 otherwise
    for name, word in (("amp-bf16", 2), ("fp32", 4)):
        gather = price(_profile(precision=name), spec, net, at).collective("dp all_gather")
        assert gather.bytes == word * 1_000_000_000


def test_tensor_parallel_share_of_a_gpt_block_is_by_time():
    # issue 23, item 1: the share of a block that tp splits was counted in ops, and
    # autocast's casts beside each GEMM made QKV and fc1 count as 25% split; by time
    # (each op at its roofline on the GPU) the GEMMs, attention and the MLP's activation
    # run split and only the norms, residual adds and dropouts after the row-parallel
    # layers stay whole. At hidden 4096 and 4096 tokens a GEMM of 4096 x 4096 x 4096 is
    # 137 GFLOP (0.44 ms at the A100's 312 TFLOP/s) and a replicated element-wise op
    # reads and writes 4096 x 4096 x 4 B = 67 MB (33 us at 2.04 TB/s): above 0.9 split
    from dlperf.parallel.profile import profile
    from dlperf.run import Session, resolve

    model = "hf:gpt2:layers=2,hidden=4096,heads=32,positions=2048"
    run = resolve(model, gpu="a100", precision="amp-bf16", batch=2, seq_len=2048)
    assert profile(run, Session(), 2).block_split_share > 0.9


def test_plan_options_of_issue_23_item_8(capsys):
    # --no-sequence-parallel did not exist; a collective's exposed time exceeded its own
    # (pipeline plans: the bubble's slots were counted against it); tp not dividing the
    # heads was accepted when attention ran eagerly (no fused call to read the heads from)
    from dlperf.cli import main

    gpt = "hf:gpt2:layers=4,hidden=256,heads=4"
    assert main(["plan", gpt, "--gpus", "8", "--tp", "2", "--pp", "2", "--no-sequence-parallel",
                 "--top", "50", "--json"]) == 0  # fmt: skip
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans and not any(p["sequence_parallel"] for p in plans)
    for p in plans:
        for c in p["collectives"]:
            assert c["exposed_time_s"] <= c["time_s"] + 1e-15, (p["dp"], c)
    eager = ["plan", gpt, "--gpus", "8", "--tp", "8", "--attention", "eager"]
    assert main(eager) == 2
    assert "does not divide the 4 attention heads" in capsys.readouterr().err


def test_a_recompute_repeats_the_all_reduces_of_the_row_parallel_gemms_it_reruns():
    # a Llama block's row-parallel GEMMs are o_proj and down_proj: full recompute runs both
    # again (two more tp all-reduces per block); selective-op saves the 1st, 3rd, 5th and
    # 7th linear outputs (q, v, gate, down), so only o_proj's all-reduce comes back
    from dlperf.parallel.profile import profile
    from dlperf.run import Session, resolve

    model = "hf:llama:layers=2,hidden=256,heads=4,kv_heads=4,mlp=512,vocab=1000"
    for policy, reduces in (("full", 2), ("selective-op", 1)):
        run = resolve(model, gpu="a100", batch=2, seq_len=128, checkpoint=policy)
        assert profile(run, Session(), 2).block_recomputed_reduces == reduces


def test_without_sequence_parallelism_tp8_loses_only_the_replicated_ops_time():
    # issue 23: at tp 8 a plan without sequence parallelism runs the ops tensor
    # parallelism leaves whole (norms, residual adds, dropouts after the row-parallel
    # layers) on all 8 GPUs, where sequence parallelism splits them 8 ways; its
    # all-reduce and SP's all-gather + reduce-scatter move the same ring volume. So the
    # step is slower by at most 7/8 of the replicated ops' time, and by no less than 0.
    from dlperf.parallel import Layout, interconnect_for, price
    from dlperf.parallel.profile import profile
    from dlperf.run import Session, resolve

    model = "hf:gpt2:layers=4,hidden=1024,heads=16,positions=1024"
    run = resolve(model, gpu="a100", precision="amp-bf16", batch=2, seq_len=1024)
    p = profile(run, Session(), 2)
    net = interconnect_for(run.spec, 8)
    tp8 = dict(dp=1, tp=8, pp=1, micro_batches=2)
    layouts = (Layout(**tp8, sequence_parallel=s) for s in (False, True))
    plain, sp = (price(p, run.spec, net, at) for at in layouts)
    blocks = p.blocks * (p.block_forward_s + p.block_backward_s) * (1 - p.block_split_share)
    post = (p.post_forward_s + p.post_backward_s) * (1 - p.post_split_share)
    replicated = 2 * (blocks + post)  # two micro-batches
    extra = plain.step_time_s - sp.step_time_s
    assert 0 < extra <= replicated * 7 / 8 * (1 + 1e-9)
    assert plain.comm_time_s == pytest.approx(sp.comm_time_s, rel=0.01)
