"""One rank of `dlperf measure-comm`, started by torch.distributed's launcher.

Times all-reduce, all-gather and reduce-scatter over a sweep of sizes with
torch.distributed (gloo on CPUs, NCCL on GPUs) and, on rank 0, writes the
samples as JSON to the path given by --out.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "reduce_scatter")


def _run(op: str, buffer: torch.Tensor, world: int):
    if op == "all_reduce":
        dist.all_reduce(buffer)
    elif op == "all_gather":
        chunk = buffer.numel() // world
        parts = list(buffer[: chunk * world].split(chunk))
        dist.all_gather(parts, buffer[:chunk].clone())
    else:
        chunk = buffer.numel() // world
        parts = list(buffer[: chunk * world].split(chunk))
        out = torch.empty_like(parts[0])
        dist.reduce_scatter(out, parts)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts")
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = "cpu"
    if args.backend == "nccl":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    results, skipped = [], {}
    for nbytes in (int(s) for s in args.sizes.split(",")):
        elements = max(world, nbytes // 4)
        buffer = torch.ones(elements, dtype=torch.float32, device=device)
        for op in OPS:
            if op in skipped:
                continue
            try:
                _run(op, buffer, world)  # warm-up
            except (RuntimeError, NotImplementedError) as err:
                skipped[op] = str(err).splitlines()[0][:160]
                continue
            samples = []
            for _ in range(args.repeats):
                dist.barrier()
                sync()
                start = time.perf_counter()
                _run(op, buffer, world)
                sync()
                samples.append(time.perf_counter() - start)
            results.append({"op": op, "bytes": elements * 4, "samples_s": samples})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(
                {"world": world, "backend": args.backend, "results": results, "skipped": skipped}, f
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
