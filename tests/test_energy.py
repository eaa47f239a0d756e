"""Energy and cost of a step and a run (kernels/energy.py, Analysis.run_totals),
derived from the power model's two statements: a card draws its idle share of
the TDP always, and its TDP (or cap) with the kernel's limiting unit busy."""

import dataclasses
import math

import pytest
import torch
from torch import nn

import dlperf
from dlperf.kernels.energy import kernel_watts


def test_a_kernel_draws_idle_plus_its_busier_units_share_of_the_rest():
    a100 = dlperf.gpu("a100")  # 400 W TDP, an idle tenth: 40 W
    peak = a100.peak_flops_per_s("bf16")
    bandwidth = a100.memory_bandwidth_bytes_per_s
    assert kernel_watts(a100, peak, 0, "bf16", 1.0) == pytest.approx(400)  # math at peak
    assert kernel_watts(a100, peak / 2, 0, "bf16", 1.0) == pytest.approx(40 + 360 / 2)
    assert kernel_watts(a100, 0, bandwidth / 2, "bf16", 1.0) == pytest.approx(220)
    assert kernel_watts(a100, 0, 0, "bf16", 1.0) == pytest.approx(40)  # nothing busy
    capped = dataclasses.replace(a100, power_limit_watts=300.0)
    assert kernel_watts(capped, peak, 0, "bf16", 1.0) == pytest.approx(300)


def test_a_steps_energy_is_its_kernels_and_its_waits():
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    a = dlperf.analyze(model, torch.empty(512, 1024, device="meta"), gpu="h100",
                       precision="amp-bf16")  # fmt: skip
    e = a.energy
    by_hand = sum(kernel_watts(a.spec, r.flops, r.bytes, r.dtype, r.time_s) * r.time_s
                  for r in a.rows)  # fmt: skip
    idle = 0.1 * 700  # the H100's idle share of its 700 W
    assert e.kernel_joules == pytest.approx(by_hand)
    assert e.idle_joules == pytest.approx((a.step_time_s - a.time_s) * idle)
    assert e.joules == pytest.approx(e.kernel_joules + e.idle_joules)
    assert idle <= e.average_watts <= 700
    cpu = dlperf.analyze(model, torch.empty(512, 1024, device="meta"), gpu="cpu")
    assert cpu.energy is None  # no stated power


def test_a_run_of_tokens_is_whole_steps_at_the_price_of_their_time():
    a = dlperf.analyze("hf:gpt2:layers=2", gpu="a100", batch=4, seq_len=256)
    tokens_per_step = 4 * 256
    run = a.run_totals(tokens=10_000, price=3.0)
    assert run["steps"] == math.ceil(10_000 / tokens_per_step)  # 10 steps
    assert run["time_s"] == pytest.approx(10 * a.step_time_s)
    assert run["energy_j"] == pytest.approx(10 * a.energy.joules)
    per_step = 3.0 * a.step_time_s / 3600
    assert run["cost"]["per_run"] == pytest.approx(10 * per_step)
    assert run["cost"]["per_million_tokens"] == pytest.approx(per_step * 1e6 / tokens_per_step)
    assert "cost" not in a.run_totals(steps=5)  # no price: energy only


def test_a_served_tokens_energy_is_its_share_of_the_requests():
    r = dlperf.serve("hf:llama-7b", gpu="h100", precision="bf16", batch=8, input_len=64,
                     output_len=32)  # fmt: skip
    prompt, step = r.prefill.extra["energy_j"], r.decode.extra["energy_j"]
    # each step draws between the idle tenth (70 W) and the 700 W cap over its time
    assert 70 * r.tpot_s <= step <= 700 * r.tpot_s
    assert 70 * r.ttft_s <= prompt <= 700 * r.ttft_s
    # the prompt's forward and 31 more decode steps, for 8 x 32 output tokens
    per_token = (prompt + 31 * step) / (8 * 32)
    assert r.energy_per_output_token_j == pytest.approx(per_token)


def test_a_power_cap_slows_memory_bound_work_too():
    # issue 36, item 12: GPT-2 training on an A100 took 19.4 ms at 400, 100 and 50 W while
    # its energy fell: the cap slowed the math alone, though HBM and the memory system
    # draw power too. Streaming draws idle + 0.4 of the rest (hardware.clocks): 184 W on
    # an A100, so caps above it keep the bandwidth, and 50 W streams at 10 / 144 of it.
    from dlperf.hardware.clocks import MEMORY_POWER_SHARE, power_bandwidth_fraction

    assert power_bandwidth_fraction(dlperf.gpu("a100")) == 1.0
    assert power_bandwidth_fraction(dlperf.gpu("a100", power_limit=200)) == 1.0
    capped = power_bandwidth_fraction(dlperf.gpu("a100", power_limit=50))
    assert capped == pytest.approx((50 - 40) / (MEMORY_POWER_SHARE * 360))
    runs = {
        watts: dlperf.analyze("hf:gpt2:layers=2", gpu="a100", batch=4, seq_len=256,
                              training=True, power_limit=watts)  # fmt: skip
        for watts in (400, 100, 50)
    }

    def memory_bound_s(a):
        return sum(r.time_s for r in a.rows if r.bound == "memory")

    full, hundred, fifty = (memory_bound_s(runs[w]) for w in (400, 100, 50))
    assert full < hundred < fifty
    assert fifty > 5 * full  # large streaming kernels at 7% of the bandwidth
    assert runs[400].step_time_s < runs[100].step_time_s < runs[50].step_time_s
