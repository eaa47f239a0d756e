"""The host's issue timeline and the optimizer kernels it charges.

Expected values are derived from the spec data's host costs (read, not
restated): on an A100, an eager op of one kernel costs the host
eager_op_host_s + kernel_launch_host_s (10 + 3 = 13 us in the file today).
"""

import dataclasses
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import dlperf
from dlperf.hardware.framework import framework_host
from dlperf.hardware.spec import spec_from_dict
from dlperf.kernels.fixed_costs import gap_s
from dlperf.kernels.host import issue_timeline
from dlperf.optimizer import multi_tensor_launches, step_launches, step_traffic
from tests.fake_cpu import fake_cpu_doc

US = 1e-6
A100 = dlperf.gpu("a100-sxm4-80gb")
HOST = framework_host(A100.architecture)
EAGER_OP = HOST.eager_op_host_s + HOST.kernel_launch_host_s  # one op, one kernel
# The idle gap between two kernels back to back on one stream, and in a CUDA graph
STREAM_GAP = gap_s(A100)
GRAPH_GAP = gap_s(A100, cuda_graphs=True)


@dataclass
class Row:
    time_s: float
    kernels: int = 1
    phase: str = "forward"
    host_ops: int = 1


def test_short_kernels_wait_for_the_host():
    # three 1 us kernels, each issued EAGER_OP after the previous one: the GPU
    # runs each as soon as it arrives, so the step ends 1 us after the third issue
    t = issue_timeline([Row(1 * US)] * 3, A100)
    assert t.step_s == pytest.approx(3 * EAGER_OP + 1 * US)
    assert t.gpu_busy_s == pytest.approx(3 * US)
    assert t.host_s == pytest.approx(3 * EAGER_OP)
    assert t.idle_s == pytest.approx(t.step_s - t.gpu_busy_s)


def test_long_kernels_hide_the_host_but_the_first_issue():
    # three 1 ms kernels: the host issues the next long before the GPU needs it;
    # only the first issue is exposed, and the second and third start a gap after
    # their predecessor
    t = issue_timeline([Row(1e-3)] * 3, A100)
    assert t.step_s == pytest.approx(EAGER_OP + 3e-3 + 2 * STREAM_GAP)
    assert t.idle_s == pytest.approx(EAGER_OP + 2 * STREAM_GAP)


def test_idle_is_charged_to_the_phase_that_waits():
    # forward: two 1 us kernels; backward: one 1 ms kernel. The GPU waits EAGER_OP
    # for the first kernel, then EAGER_OP - 1 us for each of the next two.
    rows = [Row(1 * US), Row(1 * US), Row(1e-3, phase="backward")]
    t = issue_timeline(rows, A100)
    assert t.idle_by_phase_s["forward"] == pytest.approx(EAGER_OP + (EAGER_OP - 1 * US))
    assert t.idle_by_phase_s["backward"] == pytest.approx(EAGER_OP - 1 * US)
    assert t.step_s == pytest.approx(3 * EAGER_OP + 1e-3)  # third issue, then 1 ms


def test_the_host_runs_ahead_by_the_launch_queue_at_most():
    # a 1 s kernel, then Q + 9 empty ones (Q = the launch queue depth): the host
    # issues Q - 1 of them during the long kernel, then kernel Q waits for kernel
    # 0 to finish, and the last 10 issue one after another after that:
    # step = EAGER_OP + 1 s + 10 * EAGER_OP
    # (on an A100 whose kernels back to back leave no gap, to isolate the queue)
    queue = int(HOST.launch_queue_depth)
    no_gap = dataclasses.replace(
        A100, efficiency=dataclasses.replace(A100.efficiency, stream_gap_s=0.0)
    )
    t = issue_timeline([Row(1.0)] + [Row(0.0)] * (queue + 9), no_gap)
    assert t.step_s == pytest.approx(1.0 + 11 * EAGER_OP)
    assert t.idle_s == pytest.approx(t.step_s - 1.0)


def test_cuda_graphs_remove_the_per_op_host_term():
    # one graph launch, then the kernels back to back, the graph's gap between them
    t = issue_timeline([Row(1e-3)] * 3, A100, cuda_graphs=True)
    assert t.step_s == pytest.approx(HOST.graph_launch_host_s + 3e-3 + 2 * GRAPH_GAP)
    assert t.host_s == pytest.approx(HOST.graph_launch_host_s)


def test_compiled_kernels_cost_the_wrapper_not_the_dispatcher():
    # two forward rows of 2 tiny kernels each: 4 kernels at the compiled cost;
    # the optimizer row stays eager (one op, one kernel)
    rows = [Row(2 * US, kernels=2), Row(2 * US, kernels=2), Row(1 * US, phase="optimizer")]
    t = issue_timeline(rows, A100, compiled=True)
    assert t.host_s == pytest.approx(4 * HOST.compiled_kernel_host_s + EAGER_OP)
    assert t.step_s == pytest.approx(t.host_s + 1 * US)


def test_a_per_parameter_loop_pays_the_host_per_op():
    # one row of 100 framework calls of one 1 us kernel each: 100 issues, then 1 us
    t = issue_timeline([Row(100 * US, kernels=100, phase="optimizer", host_ops=100)], A100)
    assert t.step_s == pytest.approx(100 * EAGER_OP + 1 * US)
    # the same row as one multi-tensor call of 100 launches pays one dispatch
    one = issue_timeline([Row(100 * US, kernels=100, phase="optimizer")], A100)
    assert one.host_s == pytest.approx(HOST.eager_op_host_s + 100 * HOST.kernel_launch_host_s)


def test_a_long_multi_kernel_row_overlaps_its_own_issue():
    # 4 kernels of 1 ms in one row: after the first issue the GPU never waits for the
    # host, and the last three start a gap after their predecessor
    t = issue_timeline([Row(4e-3, kernels=4, host_ops=4)], A100)
    assert t.step_s == pytest.approx(EAGER_OP + 4e-3 + 3 * STREAM_GAP)


def test_on_a_cpu_the_step_is_the_plain_sum():
    # the CPU's op prices already hold their eager cost; nothing overlaps
    cpu = spec_from_dict(fake_cpu_doc(1e10))
    t = issue_timeline([Row(1 * US)] * 3, cpu)
    assert t.step_s == pytest.approx(3 * US) and t.idle_s == 0.0


# -- the optimizer's kernels ---------------------------------------------------


def test_multi_tensor_apply_splits_launches_as_pytorch_does():
    # 32 KB kernel arguments (CUDA 12.1+, Volta+): at most 770 tensors of depth 1
    assert multi_tensor_launches([1000] * 148, depth=1) == 1
    assert multi_tensor_launches([1000] * 1000, depth=1) == 2  # 770, then 230
    # one scalar per tensor: 672 at depth 1
    assert multi_tensor_launches([1000] * 700, depth=1, scalar_list=True) == 2
    # 2240 blocks of 65536 elements fill a launch; one more chunk takes a second
    assert multi_tensor_launches([2240 * 65536 + 1], depth=3) == 2
    # 4 KB arguments (before Volta): 64 tensors at depth 2, 320 blocks
    assert multi_tensor_launches([1000] * 100, depth=2, large_kernel_args=False) == 2
    assert multi_tensor_launches([321 * 65536], depth=1, large_kernel_args=False) == 2
    assert multi_tensor_launches([0, 0], depth=1) == 0  # empty tensors are skipped


def test_optimizer_kernels_foreach_fused_and_per_parameter():
    # 10 linear layers: 10 weights (matrices) and 10 biases (vectors), 20 tensors
    shapes = [(64, 64), (64,)] * 10
    # torch.optim.AdamW on CUDA (foreach): 8 passes, each one launch for 20 small tensors
    assert step_launches("adamw", shapes) == (8, 8)
    assert step_launches("adam", shapes) == (7, 7)  # no weight-decay pass
    # fused=True: one update kernel and the step counters' _foreach_add_
    assert step_launches("adamw-fused", shapes) == (2, 2)
    # Hugging Face's adamw_hf: 7 ops per tensor, each its own kernel
    assert step_launches("adamw-hf", shapes) == (7 * 20, 7 * 20)
    # bitsandbytes 8-bit Adam: one kernel per tensor
    assert step_launches("adam8bit", shapes) == (20, 20)
    # HF Adafactor: 24 ops per factored matrix, 16 per vector
    assert step_launches("adafactor", shapes) == (24 * 10 + 16 * 10,) * 2
    # on a CPU torch.optim loops over the tensors (foreach is CUDA-only)
    cpu = spec_from_dict(fake_cpu_doc(1e10))
    assert step_launches("adamw", shapes, cpu) == (8 * 20, 8 * 20)


def test_foreach_adamw_moves_the_states_several_times():
    n = 1000
    # reads p | s g | s | s g | s | t | t | p s t = 12 words; writes 8 words
    read, written = step_traffic("adamw", n, [(n,)], word=4)
    assert (read, written) == (12 * 4 * n, 8 * 4 * n)
    # the fused kernel reads p g s s and writes p s s once: 28 B per parameter
    assert sum(step_traffic("adamw-fused", n, [(n,)], word=4)) == 28 * n


def test_the_analysis_charges_the_optimizer_kernels():
    model = nn.Linear(1000, 1000)  # weight and bias: 2 tensors, 1,001,000 parameters
    x = torch.empty(16, 1000, device="meta")
    foreach = dlperf.analyze(model, x, precision="fp32")
    row = next(r for r in foreach.rows if r.phase == "optimizer")
    assert row.kernels == 8 and row.bytes == 1_001_000 * 80  # 20 fp32 words per parameter
    hf = dlperf.analyze(model, x, precision="fp32", optimizer="adamw-hf")
    assert next(r for r in hf.rows if r.phase == "optimizer").kernels == 7 * 2
