"""The one collective model (parallel/collectives.py), derived in the open."""

import pytest

import dlperf
from dlperf.parallel import collectives
from dlperf.parallel.collectives import collective_time_s, nccl_constants, size_correction
from dlperf.parallel.network import Interconnect, interconnect_for, ring_time_s
from dlperf.serving import collectives as serving_collectives

A100 = dlperf.gpu("a100")


def test_plain_ring_moves_2_n_minus_1_over_n():
    # hand-made links (no NCCL link named): the plain ring model
    net = Interconnect(100e9, 25e9, 1e-6, 8)
    # all-reduce over 8: 2 x 7/8 x 1e9 B / 100e9 B/s = 17.5 ms, plus 2 x 7 steps x 1 us
    assert collective_time_s("all_reduce", 1e9, 8, net) == pytest.approx(0.0175 + 14e-6)
    # all-gather: 7/8 x 1e9 / 100e9 = 8.75 ms plus 7 steps x 1 us
    assert collective_time_s("all_gather", 1e9, 8, net) == pytest.approx(0.00875 + 7e-6)
    assert collective_time_s("all_reduce", 1e9, 1, net) == 0.0


def test_small_all_reduce_is_latency_ring_ll():
    # 8 B over 4 A100s: ring LL, base 3.6 us + 2 x 3 steps x 0.47 us = 6.42 us, plus the
    # Ampere launch (kernel_latency_s); the bytes add 8 B / (235e9 x 0.25 x 4/6) ~ 0 s
    net = interconnect_for(A100, 4)
    expected = A100.efficiency.kernel_latency_s + 3.6e-6 + 6 * 0.47e-6
    assert collective_time_s("all_reduce", 8, 4, net) == pytest.approx(expected, rel=1e-3)
    # LLMCompass measured 12.52 us (../shared/data/llmcompass/allreduce.csv)
    assert collective_time_s("all_reduce", 8, 4, net) == pytest.approx(12.52e-6, rel=0.05)


def test_large_all_reduce_is_ring_simple_at_the_bus_cap():
    # 16 GiB over 4 A100s: Simple at NCCL's sm80 cap 235 GB/s, algorithm bandwidth
    # 235e9 x 4 / 6; latency 8.4 + 6 x 3.4 us; beyond the correction table (factor 1)
    net = interconnect_for(A100, 4)
    nbytes = 2**34
    expected = A100.efficiency.kernel_latency_s + 8.4e-6 + 6 * 3.4e-6 + nbytes / (235e9 * 4 / 6)
    assert collective_time_s("all_reduce", nbytes, 4, net) == pytest.approx(expected, rel=1e-6)
    # LLMCompass measured 110.277 ms: within 1%
    assert collective_time_s("all_reduce", nbytes, 4, net) == pytest.approx(0.110277, rel=0.01)


def test_size_correction_is_nccls_table():
    # index log2(bytes / 64): 1 MiB -> log2(2^20 / 2^6) = 14 -> Simple 0.5; 64 B -> 0.9
    assert size_correction(2**20, "simple") == 0.5
    assert size_correction(64, "simple") == 0.9
    assert size_correction(2**40, "simple") == 1.0  # beyond the table
    assert len(nccl_constants()["size_correction"]["ll"]) == 23


def test_ll_bus_capped_by_llmaxbw():
    # Ampere, one node: LL's bus at most 87.7 GB/s (llMaxBws); 0.25 x 400 GB/s = 100 > 87.7
    net = Interconnect(400e9, 50e9, 5e-6, 8, intra_link="nvlink", architecture="ampere")
    c = nccl_constants()
    assert collectives._protocol_bus(400e9, "ring", "ll", 1, net, c) == pytest.approx(87.7e9)
    # LL128 at most 20 GB/s per channel x 12 Ampere channels = 240 GB/s; 0.92 x 400 = 368
    assert collectives._protocol_bus(400e9, "ring", "ll128", 1, net, c) == pytest.approx(240e9)


def test_serving_and_plan_use_the_same_function():
    net = interconnect_for(A100, 8)
    for nbytes in (4e4, 1e7):
        plan_s = collective_time_s("all_reduce", nbytes, 8, net)
        assert serving_collectives.collective_time_s("all_reduce", nbytes, 8, A100) == plan_s
    # across nodes: 16 ranks, 8 per node, DGX A100 network
    net16 = interconnect_for(A100, 8)
    assert serving_collectives.collective_time_s("all_reduce", 1e7, 16, A100) == collective_time_s(
        "all_reduce", 1e7, 16, net16
    )


def test_measured_links_use_the_plain_ring():
    net = interconnect_for(A100, 8)
    from dataclasses import replace

    measured = replace(net, intra_link=None, latency_s=2e-6)
    bus = measured.ring_bytes_per_s(8)
    assert collective_time_s("all_reduce", 1e6, 8, measured) == ring_time_s(
        "all_reduce", 1e6, 8, bus, 2e-6
    )


def test_vllms_custom_all_reduce_reads_its_peers_over_nvlink():
    """vLLM's own all-reduce on NVLink: its launch, its barriers (1 us a flag) and the
    bytes each GPU reads from its peers at the link's 450 GB/s (an H100's each way)."""
    from dlperf.serving.collectives import custom_all_reduce_s

    h100 = dlperf.gpu("h100")
    launch = h100.efficiency.kernel_latency_s
    # 256 KiB on 4 GPUs, one stage: 3 peers' buffers read whole, two barriers
    one = launch + 2e-6 + 3 * 262_144 / 450e9
    assert custom_all_reduce_s(262_144, 4, h100) == pytest.approx(one)
    # 1 MiB on 4 GPUs, two stages: a quarter from each of 3 peers, twice; three barriers
    two = launch + 3e-6 + 2 * 3 * 262_144 / 450e9
    assert custom_all_reduce_s(2**20, 4, h100) == pytest.approx(two)
    # 3 GPUs, or no NVLink: vLLM runs NCCL
    assert custom_all_reduce_s(2**20, 3, h100) is None
    assert custom_all_reduce_s(2**20, 2, dlperf.gpu("l4")) is None


def test_vllms_symmetric_memory_all_reduce_takes_the_larger_buffers_on_hopper():
    """On Hopper, past its custom kernel's bound (8 MiB on 4 GPUs, 256 KiB on 8),
    vLLM all-reduces through PyTorch's symmetric memory up to 32 MiB on 4 GPUs and
    64 MiB on 8, NVSwitch summing in the switch (multimem); 2 GPUs run two-shot."""
    from dlperf.serving.collectives import custom_all_reduce_s

    h100, a100 = dlperf.gpu("h100"), dlperf.gpu("a100")
    launch = h100.efficiency.kernel_latency_s
    # a 600-token prefill's 9.8 MB (600 x 8192 x 2 B) on 4 GPUs: the buffer plus a quarter
    # of it each way per GPU at 450 GB/s, two barriers: 27 us and the launch
    nbytes = 600 * 8192 * 2
    assert custom_all_reduce_s(nbytes, 4, h100) == pytest.approx(
        launch + 2e-6 + nbytes * 1.25 / 450e9)
    # 1 MiB on 8 GPUs, past the custom kernel's 256 KiB: in the switch too
    assert custom_all_reduce_s(2**20, 8, h100) == pytest.approx(
        launch + 2e-6 + 2**20 * 1.125 / 450e9)
    # 16 MiB on 2 GPUs: two-shot, half of the peer's buffer read, then half written
    assert custom_all_reduce_s(16 * 2**20, 2, h100) == pytest.approx(
        launch + 3e-6 + 2 * 8 * 2**20 / 450e9)
    # past 32 MiB on 4 GPUs, or 8 MiB on an A100 (no symmetric memory): NCCL
    assert custom_all_reduce_s(33 * 2**20, 4, h100) is None
    assert custom_all_reduce_s(8 * 2**20, 4, a100) is None
