"""The caching allocator's rules (training_memory/allocator.py), each case
worked by hand from PyTorch's constants, and the step replay built on them."""

import json

import pytest
import torch

import dlperf
from dlperf.precision import POLICIES
from dlperf.tracing import OpEvent, TensorMeta, Trace
from dlperf.training_memory import step_peaks
from dlperf.training_memory.allocator import CachingAllocator, round_size, segment_size

MiB = 2**20


def test_sizes_round_as_pytorch_rounds_them():
    assert round_size(1) == 512 and round_size(513) == 1024
    assert segment_size(1 * MiB) == 2 * MiB  # the small pool's segment
    assert segment_size(1 * MiB + 512) == 20 * MiB  # 1-10 MiB share 20 MiB segments
    assert segment_size(10 * MiB) == 10 * MiB  # from 10 MiB: its own, rounded to 2 MiB
    assert segment_size(11 * MiB) == 12 * MiB


def test_a_large_segment_holds_eighteen_requests_of_1_1_mib():
    pool = CachingAllocator()
    size = round_size(int(1.1 * MiB))  # 1,153,536 B
    # 17 splits leave 20 MiB - 17 x 1.1 MiB = 1.3 MiB (more than 1 MiB: split again);
    # the 18th takes what is left whole (0.2 MiB is not worth a block)
    for n in range(18):
        pool.malloc(n, size)
    assert pool.peaks().reserved_bytes == 20 * MiB
    pool.malloc(18, size)
    assert pool.peaks().reserved_bytes == 40 * MiB


def test_the_small_pool_packs_2048_kib_blocks_in_one_segment():
    pool = CachingAllocator()
    for n in range(2048):  # 2 MiB / 1 KiB
        pool.malloc(n, 1024)
    assert pool.peaks().segments == 1
    pool.malloc("one more", 1024)
    assert pool.peaks().segments == 2


def test_freed_neighbours_merge_within_a_segment_and_holes_fragment():
    pool = CachingAllocator()
    pool.malloc("a", 8 * MiB)
    pool.malloc("b", 8 * MiB)  # same 20 MiB segment; 4 MiB left, split off
    pool.malloc("c", 8 * MiB)  # a new one, 12 MiB left in it
    assert pool.peaks().reserved_bytes == 40 * MiB
    pool.free("a")
    # 13 MiB fits none of the free blocks (a's 8, b's tail 4, c's tail 12):
    # a segment of its own, rounded to 14 MiB
    pool.malloc("d", 13 * MiB)
    assert pool.peaks().reserved_bytes == 54 * MiB
    pool.free("b")  # merges with a's hole and the 4 MiB tail: 20 MiB free
    pool.malloc("e", 18 * MiB)  # served from it, nothing reserved
    peaks = pool.peaks()
    assert peaks.reserved_bytes == 54 * MiB
    # live at most at the end: c, d, e = 8 + 13 + 18 = 39 MiB
    assert peaks.allocated_bytes == 39 * MiB and peaks.overhead_bytes == 15 * MiB


def test_full_cache_is_emptied_before_reserving_past_capacity():
    pool = CachingAllocator(capacity_bytes=40 * MiB)
    pool.malloc("a", 30 * MiB)
    pool.free("a")
    pool.malloc("b", 32 * MiB)  # 30 + 32 > 40: the free 30 MiB segment goes back first
    peaks = pool.peaks()
    assert peaks.released == 1 and peaks.segments == 1 and pool.reserved == 32 * MiB


def _meta(nbytes: int) -> TensorMeta:
    return TensorMeta((nbytes // 4,), torch.float32, (1,))


def _event(phase: str, reads: tuple, writes: tuple, sizes: tuple) -> OpEvent:
    outputs = tuple(_meta(n) for n in sizes)
    return OpEvent("aten.op", (), {}, outputs, "m", phase, reads=reads, writes=writes)


def test_a_step_replays_as_eager_pytorch_frees():
    # one weight (storage 0, 12 MiB) and a two-op forward: storage 1 (16 MiB)
    # is saved for backward, storage 2 (12 MiB, the loss's input) dies at once;
    # backward reads 1 and makes the weight's gradient (storage 3, never read)
    events = [
        _event("forward", (0,), (1,), (16 * MiB,)),
        _event("forward", (1, 0), (2,), (12 * MiB,)),
        _event("backward", (1,), (3,), (12 * MiB,)),
    ]
    trace = Trace(
        events=events,
        precision=POLICIES["fp32"],
        training=True,
        params=3 * MiB,  # 12 MiB of fp32
        trainable_params=3 * MiB,
        param_shapes=[(3 * MiB,)],
        module_types={},
        inputs=[],
    )
    peaks = step_peaks(trace, "sgd-momentum")
    # live, second step: weight 12 + momentum 12 + storages 1 and 2 (16 + 12) = 52 MiB
    assert peaks.allocated_bytes == 52 * MiB
    # step 1 reserves the weight (12), 1 (16), 2 (12); 2's segment is free again
    # when backward makes the gradient (12, reused) and the momentum takes
    # 1's freed 16 MiB segment whole (4 MiB left is worth a split: 12 + 4).
    # Step 2: storage 1 needs 16 MiB, finds no block that large (the 4 MiB
    # remnant): a new segment; 2 takes the gradient's freed segment.
    assert peaks.reserved_bytes == (12 + 16 + 12 + 16) * MiB
    # a plan's share: the activations' own churn, without the weights, the
    # momentum and held gradients (sharded there): storages 1 and 2 (28 MiB),
    # the gradient made and dropped in 2's freed segment; step 2 reuses both
    churn = step_peaks(trace, "sgd-momentum", with_states=False)
    assert churn.allocated_bytes == churn.reserved_bytes == 28 * MiB


def test_memory_json_says_allocated_reserved_and_what_fits_is_judged_on():
    r = dlperf.memory("hf:gpt2:layers=2,hidden=128,heads=4", gpu="a100", batch=2)
    out = json.loads(json.dumps(r.to_dict()))
    assert out["allocated_bytes"] <= out["reserved_bytes"]
    assert out["reserved_bytes"] == out["allocated_bytes"] + out["allocator_bytes"]
    # what nvidia-smi shows: the allocator's segments, the context and workspace beside them
    assert out["peak_bytes"] == out["reserved_bytes"] + out["overhead_bytes"]
    assert out["fits_on"] == "reserved_bytes + overhead_bytes"
    assert out["allocator_bytes"] >= 2 * MiB  # at least the small pool's first segment


def test_the_cuda_context_is_the_users_figure_where_given(tmp_path):
    from dlperf.errors import DlperfError
    from dlperf.hardware.spec import SPECS_DIR
    from dlperf.training_memory.step import framework_memory

    model = "hf:gpt2:layers=2,hidden=128,heads=4"
    default = framework_memory("volta").cuda_context_bytes  # the framework file's figure
    base = dlperf.memory(model, gpu="v100-sxm2-16gb", batch=2)
    given = dlperf.gpu("v100-sxm2-16gb", cuda_context_mib=1343)
    mine = dlperf.memory(model, gpu=given, batch=2)
    # only the context moves: 1343 MiB in place of the file's figure, tensors as they were
    assert mine.peak_bytes - base.peak_bytes == 1343 * MiB - default
    assert mine.reserved_bytes == base.reserved_bytes
    # the plan and the serving deployment take the same figure
    plans = [dlperf.plan(model, gpu=g, gpus=2, micro_batch=2) for g in ("v100-sxm2-16gb", given)]
    assert plans[1].plans[0].memory.overhead_bytes - plans[0].plans[0].memory.overhead_bytes == (
        pytest.approx(1343 * MiB - default)
    )
    serves = [dlperf.serve(model, gpu=g, batch=2) for g in ("v100-sxm2-16gb", given)]
    assert serves[1].memory["workspace_bytes"] - serves[0].memory["workspace_bytes"] == (
        1343 * MiB - default
    )
    # a spec file says it as cuda_context_bytes
    text = (SPECS_DIR / "v100-sxm2-16gb.toml").read_text()
    path = tmp_path / "old-driver.toml"
    path.write_text(f"cuda_context_bytes = {1343 * MiB}\n" + text)
    assert dlperf.memory(model, gpu=str(path), batch=2).peak_bytes == mine.peak_bytes
    for bad, match in ((0, "positive"), (-5, "positive")):
        try:
            dlperf.gpu("a100", cuda_context_mib=bad)
        except DlperfError as e:
            assert match in str(e)
        else:
            raise AssertionError(f"cuda_context_mib={bad} was taken")
    try:
        dlperf.gpu("cpu", cuda_context_mib=100)
    except DlperfError as e:
        assert "a CPU has none" in str(e)
    else:
        raise AssertionError("a CPU took a CUDA context")
