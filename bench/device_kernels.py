"""dlperf beside kernels timed on a lent H100 (bench/device/kernels.py's figures).

The figures are in bench/measured/<gpu>-<date>/kernels.jsonl (one kernel a line,
median of CUDA-event timings with L2 flushed before each call). Each is priced
here as dlperf prices the same call in a model's step: GEMMs by `kernels.gemm`
(bf16, fp8), attention and element-wise ops by analysing a module that makes
the one call (SDPA with the backend asked for, F.rms_norm, SiLU-and-mul, a copy).
Prints per group the median |error| and the median signed error (+: dlperf
slower than measured), and the rows.

Run: python bench/device_kernels.py [--data bench/measured/h100-2026-11-28] [--rows]
     [--fit-attention]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dlperf import analyze
from dlperf.hardware import gpu
from dlperf.kernels.gemm import gemm

HERE = Path(__file__).parent
DEFAULT_DATA = HERE / "measured" / "h100-2026-11-28"
GPU = "h100-sxm5-80gb"


class _Attention(nn.Module):
    """One SDPA call on q, k, v held as parameters, so a training step runs its backward."""

    def __init__(self, batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal):
        super().__init__()
        self.q = nn.Parameter(torch.empty(batch, heads, seq_q, head_dim))
        self.k = nn.Parameter(torch.empty(batch, kv_heads, seq_kv, head_dim))
        self.v = nn.Parameter(torch.empty(batch, kv_heads, seq_kv, head_dim))
        self.causal, self.gqa = causal, kv_heads != heads

    def forward(self, x):
        out = F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal,
                                             enable_gqa=self.gqa)  # fmt: skip
        return out + x


class _Elementwise(nn.Module):
    def __init__(self, op: str, hidden: int, ffn: int):
        super().__init__()
        self.op, self.hidden, self.ffn = op, hidden, ffn
        self.weight = nn.Parameter(torch.empty(hidden))

    def forward(self, x, gate_up):
        if self.op == "rms_norm":
            return F.rms_norm(x, (self.hidden,), self.weight)
        if self.op == "silu_and_mul":
            return F.silu(gate_up[:, : self.ffn]) * gate_up[:, self.ffn :]
        return gate_up.clone()


def _op_seconds(analysis, name: str, phases=("forward", "backward")) -> float:
    return sum(r.time_s for r in analysis.rows if name in r.op and str(r.phase.value) in phases)


def gemm_rows(rows: list[dict], spec) -> list[tuple[str, dict, float]]:
    out = []
    for r in rows:
        if r["group"] not in ("gemm_serving", "gemm_training") or "ms" not in r:
            continue
        if r.get("fast_accum") is False:
            continue  # the split-accumulator fp8 kernel: kept as a figure, priced the same
        size = "decode" if r["m"] <= 256 else "mixed" if r["m"] <= 2048 else "large"
        if r["group"] == "gemm_training":
            size = "training"
        label = f"gemm {r['dtype']} {size}"
        out.append((label, r, gemm(r["m"], r["n"], r["k"], dtype=r["dtype"], gpu=spec).time_s))
    return out


def attention_rows(rows: list[dict], spec) -> list[tuple[str, dict, float]]:
    out = []
    for r in rows:
        if r["group"] == "attention_training" and "fwd_ms" in r:
            m = _Attention(
                r["batch"], r["heads"], r["kv_heads"], r["seq"], r["seq"], r["head_dim"], True
            )
            x = torch.empty(r["batch"], r["heads"], r["seq"], r["head_dim"])
            a = analyze(m, (x,), gpu=spec, precision="bf16", training=True, attention=r["backend"])
            fwd = _op_seconds(a, "attention", ("forward",))
            both = _op_seconds(a, "attention")
            out.append((f"attention {r['backend']} fwd", r | {"ms": r["fwd_ms"]}, fwd))
            out.append((f"attention {r['backend']} fwd+bwd", r | {"ms": r["fwd_bwd_ms"]}, both))
        elif r["group"] == "attention_decode" and "ms" in r:
            m = _Attention(
                r["batch"], r["heads"], r["kv_heads"], 1, r["cache"], r["head_dim"], False
            )
            x = torch.empty(r["batch"], r["heads"], 1, r["head_dim"])
            a = analyze(m, (x,), gpu=spec, precision="bf16", training=False, attention=r["backend"])
            out.append((f"decode attention {r['backend']}", r, _op_seconds(a, "attention")))
    return out


def elementwise_rows(rows: list[dict], spec) -> list[tuple[str, dict, float]]:
    out = []
    for r in rows:
        if r["group"] != "elementwise":
            continue
        m = _Elementwise(r["op"], r["hidden"], r["ffn"])
        x = torch.empty(r["tokens"], r["hidden"])
        gate_up = torch.empty(r["tokens"], 2 * r["ffn"])
        a = analyze(m, (x, gate_up), gpu=spec, precision="bf16", training=False)
        out.append((f"elementwise {r['op']}", r, sum(o.time_s for o in a.rows if o.op != "add")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument(
        "--fit-attention", action="store_true", help="refit Hopper's attention anchors"
    )
    args = parser.parse_args()
    lines = (args.data / "kernels.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    machine = rows[0]
    print(f"measured: {machine['gpu']} ({machine['nvidia_smi']}), torch {machine['torch']}, "
          f"{machine['date']}; priced on {GPU}")  # fmt: skip
    spec = gpu(GPU)
    attention = attention_rows(rows, spec)  # priced once: the refit reads them too
    priced = gemm_rows(rows, spec) + attention + elementwise_rows(rows, spec)
    groups: dict[str, list[float]] = {}
    for label, row, seconds in priced:
        err = seconds / (row["ms"] * 1e-3) - 1.0
        groups.setdefault(label, []).append(err)
        if args.rows:
            shape = {
                k: v for k, v in row.items() if k not in ("group", "ms", "fwd_ms", "fwd_bwd_ms")
            }
            print(f"  {label:32s} {row['ms'] * 1e3:9.1f} us measured {seconds * 1e6:9.1f} us "
                  f"predicted {err:+6.1%}  {shape}")  # fmt: skip
    print(f"{'group':32s} {'rows':>4s} {'median |err|':>12s} {'median err':>10s}")
    for label, errs in groups.items():
        ape = statistics.median(abs(e) for e in errs)
        print(f"{label:32s} {len(errs):4d} {ape:12.1%} {statistics.median(errs):+10.1%}")
    every = [abs(e) for errs in groups.values() for e in errs]
    print(f"{'all':32s} {len(every):4d} {statistics.median(every):12.1%}")
    if args.fit_attention:
        attention_anchors(attention, spec)


def attention_anchors(attention: list[tuple[str, dict, float]], spec) -> None:
    """Hopper's fused-attention constants refitted on these kernels. An anchor
    scales a kernel's main-loop rate, so the time goes as 1 / anchor: the refit is
    the anchor times the median of predicted / measured. A backward thread block
    also pays `attention_backward_overhead_steps` K/V steps beyond its loop (the
    forward's one, as prologue and epilogue); its time goes as (S + o + 2) / S for
    S = seq / 128 steps under a causal mask: o is refitted with the backward
    anchors, one o for all kernels. The backward is fwd+bwd less fwd, measured and
    predicted alike. Leave-one-out: refit without one sequence length, judged on it.
    `attention` is `attention_rows`'s pricing of the measured kernels."""
    from dlperf.kernels.attention import BLOCK_ROWS

    eff = spec.efficiency
    old = eff.attention_backward_overhead_steps
    fwd = {}
    for label, row, seconds in attention:
        if row["group"] == "attention_training" and label.endswith(" fwd"):
            fwd.setdefault(label.split()[1], []).append((row["seq"], seconds / (row["ms"] * 1e-3)))
    bwd = {b: _backward_ratios(attention, b) for b in fwd}

    def rescaled(pairs, o):  # predicted / measured under overhead o, anchors unchanged
        return [(seq, r * (seq / BLOCK_ROWS + o + 2) / (seq / BLOCK_ROWS + old + 2))
                for seq, r in pairs]  # fmt: skip

    def fit(keep):  # (o, {backend: anchor factor}) minimising the median |error|
        best = None
        for o in [x / 2 for x in range(0, 41)]:
            factors, errs = {}, []
            for b, pairs in bwd.items():
                ratios = [r for seq, r in rescaled(pairs, o) if keep(seq)]
                factors[b] = statistics.median(ratios)
                errs += [abs(r / factors[b] - 1) for r in ratios]
            score = statistics.median(errs)
            if best is None or score < best[0]:
                best = (score, o, factors)
        return best[1], best[2]

    o, factors = fit(lambda seq: True)
    seqs = sorted({seq for pairs in bwd.values() for seq, _ in pairs})
    loo = {b: 0.0 for b in bwd}
    for held in seqs:
        o_h, f_h = fit(lambda seq, held=held: seq != held)
        for b, pairs in bwd.items():
            for _, r in (p for p in rescaled(pairs, o_h) if p[0] == held):
                loo[b] = max(loo[b], abs(r / f_h[b] - 1))
    print(f"\nHopper attention refitted: backward overhead {old:g} -> {o:g} K/V steps a block")
    print(f"{'kernel':22s} {'anchor':>7s} {'refit':>7s} {'rows':>4s} {'LOO max |err|':>14s}")
    for b, pairs in fwd.items():
        anchor = eff.attention[b].of("forward")
        refit = anchor * statistics.median(r for _, r in pairs)
        worst = 0.0
        for held in seqs:
            f_h = statistics.median(r for seq, r in pairs if seq != held)
            worst = max([worst] + [abs(r / f_h - 1) for seq, r in pairs if seq == held])
        print(f"{b + ' forward':22s} {anchor:7.3f} {refit:7.3f} {len(pairs):4d} {worst:14.1%}")
        anchor = eff.attention[b].of("backward")
        print(f"{b + ' backward':22s} {anchor:7.3f} {anchor * factors[b]:7.3f} "
              f"{len(bwd[b]):4d} {loo[b]:14.1%}")  # fmt: skip


def _backward_ratios(attention, backend) -> list[tuple[int, float]]:
    fwd, both = {}, {}
    for label, row, seconds in attention:
        if row["group"] != "attention_training" or label.split()[1] != backend:
            continue
        key = (row["seq"], row["kv_heads"])
        target = fwd if label.endswith(" fwd") else both
        target[key] = (seconds, row["ms"] * 1e-3)
    return [(key[0], (both[key][0] - fwd[key][0]) / (both[key][1] - fwd[key][1])) for key in fwd]


if __name__ == "__main__":
    main()
