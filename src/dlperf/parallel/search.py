"""The plans of N GPUs: every layout the given dimensions leave open.

A dimension the user fixed (`Fixed`) takes that value only; the others are
searched: tp over the divisors of the GPUs up to the GPUs per node (and 1
where the blocks have no linear layers to split), cp where the inputs are
token sequences (the sequence divisible by 2 cp, Megatron-LM's
load-balanced chunks), pp up to the number of blocks, dp the rest; ep over
the divisors of dp that divide the experts (MoE models only); every
sharding (hsdp only where the data-parallel ranks span nodes); the
schedules of `schedule.searched_schedules`; sequence parallelism on and off
under tp. Checkpointing is one profile per policy (report.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import DlperfError
from ..run_config import ParallelConfig
from .layout import SHARDINGS, Layout, check_sharding
from .profile import ModelProfile
from .schedule import Schedule, parse_schedule, searched_schedules

# The dimensions a user may fix (a `ParallelConfig`'s); None is searched.
DIMENSIONS = ("dp", "tp", "pp", "cp", "ep", "sharding", "schedule", "sequence_parallel")


def fixed_dimensions(parallel: ParallelConfig) -> dict:
    """The dimensions `parallel` fixes, checked: {name: value}."""
    if parallel.sharding is not None:
        check_sharding(parallel.sharding)
    if parallel.schedule is not None:
        parse_schedule(parallel.schedule)
    found = {name: getattr(parallel, name) for name in DIMENSIONS}
    return {name: value for name, value in found.items() if value is not None}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def problem(
    profile: ModelProfile, gpus: int, global_batch: int, dims: dict, seq_len: int
) -> str | None:
    """Why a layout cannot run (None: it can)."""
    dp, tp, pp, cp, ep = (dims[k] for k in ("dp", "tp", "pp", "cp", "ep"))
    if dp * tp * pp * cp != gpus:
        return f"dp x tp x pp x cp = {dp * tp * pp * cp}, not the {gpus} GPUs"
    if global_batch % (dp * profile.micro_batch):
        return (
            f"the global batch {global_batch} does not split into micro-batches of "
            f"{profile.micro_batch} over dp {dp}"
        )
    if pp > max(profile.blocks, 1):
        return f"pp {pp} is more than the model's {profile.blocks} repeated blocks"
    if tp > 1 and not (profile.blocks and profile.tensor_parallel):
        return "tensor parallelism needs repeated blocks with linear layers"
    if tp > 1 and any(n % tp for n in (profile.heads, profile.kv_heads) if n):
        # Megatron-LM splits whole heads (and key/value groups) over the tp GPUs
        return (
            f"tp {tp} does not divide the {profile.heads} attention heads "
            f"({profile.kv_heads} key/value heads)"
        )
    if cp > 1 and (not seq_len or seq_len % (2 * cp)):
        return f"cp {cp} needs token inputs whose length divides by 2 x cp"
    if ep > 1 and (not profile.is_moe or profile.experts % ep or not _ep_fits(dp, tp, ep)):
        return (f"ep {ep} needs a mixture-of-experts model whose experts divide by it, and "
                "dp dividing by it (or dp x tp, in whole tp groups)")  # fmt: skip
    if ep > 1 and dp % ep and tp > 1 and not dims["sequence_parallel"]:
        # Megatron-Core: MoE with tensor parallelism runs sequence parallel
        return f"ep {ep} across the tp GPUs needs sequence parallelism"
    if dims["sharding"] != "none" and dp == 1:
        return f"sharding {dims['sharding']} needs dp > 1"
    if dims["sharding"] == "zero2" and pp > 1:
        # DeepSpeed's pipeline engine takes ZeRO-1 only; Megatron-LM's distributed
        # optimizer is ZeRO-1 (FSDP2 runs beside pipelines, as torchtitan does)
        return "zero2 does not run with pipeline parallelism; use zero1 or fsdp"
    if dims["sequence_parallel"] and tp == 1:
        return "sequence parallelism needs tp > 1"
    m = global_batch // (dp * profile.micro_batch)
    schedule: Schedule = dims["schedule"]
    if not schedule.allows(pp, m, profile.blocks):
        if pp == 1:
            return f"schedule {schedule.name} needs pp > 1"
        why = ("m a multiple of pp" if m % pp else
               f"pp x V = {pp * schedule.chunks} virtual stages of a block at least, counting "
               "the embedding and the loss as one each")  # fmt: skip
        return (
            f"schedule {schedule.name} cannot run {pp} stages with {m} micro-batches "
            f"and {profile.blocks} blocks (interleaved needs {why})"
        )
    return None


def _ep_fits(dp: int, tp: int, ep: int) -> bool:
    """ep carved out of dp, or out of dp x tp in whole tp groups (`Layout.expert_tp`)."""
    return dp % ep == 0 or (ep % tp == 0 and (dp * tp) % ep == 0)


def _options(fixed, searched):
    return [fixed] if fixed is not None else searched


def _dims(profile: ModelProfile, gpus: int, per_node: int, fixed: ParallelConfig) -> Iterator[dict]:
    splittable = profile.blocks and profile.tensor_parallel
    tps = [d for d in _divisors(gpus) if d <= per_node] if splittable else [1]
    for tp in _options(fixed.tp, tps):
        for cp in _options(fixed.cp, _divisors(gpus // tp) if gpus % tp == 0 else [1]):
            rest = gpus // (tp * cp) if gpus % (tp * cp) == 0 else 0
            pps = [d for d in _divisors(rest) if d <= max(profile.blocks, 1)] if rest else [1]
            for pp in _options(fixed.pp, pps):
                dp = gpus // (tp * cp * pp) if gpus % (tp * cp * pp) == 0 else 0
                if fixed.dp is not None:
                    dp = fixed.dp
                if not dp:
                    continue
                eps = (
                    [e for e in _divisors(dp * tp)
                     if profile.experts % e == 0 and _ep_fits(dp, tp, e)]
                    if profile.is_moe
                    else [1]
                )  # fmt: skip
                for ep in _options(fixed.ep, eps):
                    yield from _variants(dict(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep), per_node, fixed)


def _variants(base: dict, per_node: int, fixed: ParallelConfig) -> Iterator[dict]:
    dp, tp, pp, cp = base["dp"], base["tp"], base["pp"], base["cp"]
    # hsdp differs from fsdp only where the data-parallel ranks span nodes with
    # more than one of them in each
    hybrid = dp * tp * cp > per_node and per_node // (tp * cp) > 1
    shardings = [s for s in SHARDINGS if s != "hsdp" or hybrid] if dp > 1 else ["none"]
    schedules = searched_schedules(pp)
    fixed_schedule = parse_schedule(fixed.schedule) if fixed.schedule else None
    for sharding in _options(fixed.sharding, shardings):
        for schedule in _options(fixed_schedule, schedules):
            for sp in _options(fixed.sequence_parallel, [False, True] if tp > 1 else [False]):
                yield {**base, "sharding": sharding, "schedule": schedule, "sequence_parallel": sp}


def layouts(
    profile: ModelProfile,
    gpus: int,
    gpus_per_node: int,
    global_batch: int,
    fixed: ParallelConfig,
    seq_len: int = 0,
) -> list[Layout]:
    """Every layout of `gpus` GPUs that runs, within the fixed dimensions; a
    DlperfError saying why when the fixed ones leave none."""
    found, reasons = [], []
    for dims in _dims(profile, gpus, gpus_per_node, fixed):
        why = problem(profile, gpus, global_batch, dims, seq_len)
        if why:
            reasons.append(why)
            continue
        m = global_batch // (dims["dp"] * profile.micro_batch)
        found.append(Layout(**dims, micro_batch=profile.micro_batch, micro_batches=m,
                            gpus_per_node=gpus_per_node))  # fmt: skip
    if not found:
        given = fixed_dimensions(fixed)
        given = ", ".join(f"{k} {v}" for k, v in given.items()) or "no fixed dimension"
        why = reasons[0] if reasons else "no layout of these GPUs divides the model and batch"
        raise DlperfError(
            f"no plan with {given} on {gpus} GPUs, global batch {global_batch} and micro-batch "
            f"{profile.micro_batch}: {why}"
        )
    return found
