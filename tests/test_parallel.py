"""Parallelism plans, the ring model and real collectives under torchrun."""

import dataclasses
import json

import pytest
import torch
from torch import nn

import dlperf
from dlperf.api import plan
from dlperf.cli import main
from dlperf.parallel import (
    RING_STEP_LATENCY_S,
    Interconnect,
    ModelProfile,
    interconnect_for,
    price,
    ring_time_s,
    zero_state_bytes,
)
from dlperf.precision import POLICIES


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
        block_activations_bytes=1e8,
        other_activations_bytes=0.0,
        block_output_bytes=1e7,
        block_forward_s=0.01,
        block_backward_s=0.02,
        other_forward_s=0.0,
        other_backward_s=0.0,
        optimizer_s=0.01,
        transient_bytes=0.0,
        micro_batch=1,
        tokens_per_sample=0,
        precision="amp-bf16",
        optimizer="adamw",
    )
    base.update(changes)
    return ModelProfile(**base)


def test_zero_memory_matches_the_zero_paper():
    # ZeRO (Rajbhandari et al.): mixed-precision Adam keeps 2 + 2 + K bytes per
    # parameter, K = 12 (fp32 master weights, momentum, variance).
    psi, nd = 1_000_000_000, 64
    p = _profile()
    assert zero_state_bytes(p, 1, nd, psi) == pytest.approx((2 + 2) * psi + 12 * psi / nd)
    assert zero_state_bytes(p, 2, nd, psi) == pytest.approx(2 * psi + (2 + 12) * psi / nd)
    assert zero_state_bytes(p, 3, nd, psi) == pytest.approx((2 + 2 + 12) * psi / nd)
    # The paper's figure 1, 7.5B parameters on 64 GPUs:
    # stage 1: 4 * 7.5e9 + 12 * 7.5e9 / 64 = 31.4 GB
    # stage 2: 2 * 7.5e9 + 14 * 7.5e9 / 64 = 16.6 GB
    # stage 3: 16 * 7.5e9 / 64 = 1.875 GB
    assert zero_state_bytes(p, 1, 64, 7.5e9) / 1e9 == pytest.approx(31.4, abs=0.05)
    assert zero_state_bytes(p, 2, 64, 7.5e9) / 1e9 == pytest.approx(16.6, abs=0.05)
    assert zero_state_bytes(p, 3, 64, 7.5e9) == pytest.approx(1.875e9)


def test_plan_terms_move_the_right_way():
    spec = dlperf.gpu("a100")
    net = Interconnect(300e9, 25e9, 5e-6, 8)
    p = _profile()
    ddp = price(p, spec, net, dp=8, tp=1, pp=1, zero=0, global_batch=64)
    z3 = price(p, spec, net, dp=8, tp=1, pp=1, zero=3, global_batch=64)
    assert z3.memory_per_gpu_bytes < ddp.memory_per_gpu_bytes
    assert "dp all_reduce" in ddp.collectives and "dp all_gather" in z3.collectives
    tp = price(p, spec, net, dp=1, tp=8, pp=1, zero=0, global_batch=64)
    assert tp.collectives["tp all_reduce"]["bytes"] > 0
    assert tp.memory_per_gpu_bytes < ddp.memory_per_gpu_bytes
    # pipeline bubble: (p - 1) extra stage slots over m micro-batches
    pp = price(p, spec, net, dp=1, tp=1, pp=4, zero=0, global_batch=8)
    stage = 10 / 4 * (0.01 + 0.02)
    assert pp.compute_time_s == pytest.approx((8 + 3) * stage + 0.01 / 4)


def test_plan_ranks_fitting_plans_first():
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)])
    r = plan(blocks, torch.empty(8, 256, device="meta"), gpu="a100", gpus=8, precision="fp32")
    assert r.plans[0].fits
    assert r.plans == sorted(r.plans, key=lambda p: (not p.fits, p.step_time_s))
    doc = r.to_dict()["plans"][0]
    for key in (
        "dp",
        "tp",
        "pp",
        "zero",
        "micro_batch",
        "accumulate",
        "memory_per_gpu_bytes",
        "comm_time_s",
        "step_time_s",
        "samples_per_s",
        "fits",
    ):
        assert key in doc
    assert {p.dp * p.tp * p.pp for p in r.plans} == {8}


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
    for name, policy in POLICIES.items():
        by_name = price(
            _profile(precision=name), spec, net, dp=8, tp=1, pp=1, zero=1, global_batch=64
        )
        by_value = price(_profile(precision=policy), spec, net, 8, 1, 1, 1, 64)
        assert by_name == by_value
    # ZeRO's weight all-gather moves the 16-bit copy under mixed precision, fp32 otherwise
    psi = 1_000_000_000
    for name, word in (("amp-bf16", 2), ("fp32", 4)):
        plan = price(_profile(precision=name), spec, net, dp=8, tp=1, pp=1, zero=1, global_batch=64)
        assert plan.collectives["dp all_gather"].bytes == word * psi
