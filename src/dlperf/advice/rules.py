"""The rules, one function each, in the order of the guides' checklists."""

from __future__ import annotations

import math

from torch import nn

from ..analysis import price_cost
from ..gemm import gemm
from ..ops import CostContext, cost_of
from ..tracing import OpEvent, TensorMeta, within
from . import GETTING_STARTED, MEMORY_LIMITED, RECURRENT, TALK, Finding, fixes, rule

# A layer whose ops take less than this share of the step is not worth a finding.
MIN_SHARE = 0.005


def _share(ctx, seconds: float) -> float:
    return seconds / ctx.step_time_s if ctx.step_time_s else 0.0


def _severity(fraction: float) -> str:
    return "high" if fraction >= 0.10 else "medium" if fraction >= 0.02 else "low"


def _rows_of(ctx, path: str):
    return [r for r in ctx.analysis.rows if within(r.module, path)]


# -- Tensor Cores -------------------------------------------------------------


@rule(
    "tensor-core-precision",
    "fp32 math on a GPU with Tensor Cores: use TF32 or AMP",
    f"{GETTING_STARTED} §2.2; {TALK}, 'Mixed precision training'",
    fix="precision",
)
def tensor_core_precision(ctx):
    spec = ctx.spec
    if ctx.precision.name != "fp32" or spec.kind == "cpu":
        return []
    half = "bf16" if spec.has_dtype("bf16") and spec.uses_tensor_cores("bf16") else "fp16"
    if not (spec.has_dtype(half) and spec.uses_tensor_cores(half)):
        return []
    target = f"amp-{half}"
    after = ctx.reanalyze(precision=target)
    gain, fraction = ctx.gain_of(after)
    if gain <= 0:  # too small a model: the casts cost more than Tensor Cores save
        return []
    tf32 = spec.has_dtype("tf32")
    fix = f"train with {target} (autocast{'' if half == 'bf16' else ' and a GradScaler'})" + (
        ", or at least enable TF32 (torch.backends.cuda.matmul.allow_tf32 = True)" if tf32 else ""
    )
    contraction = ctx.analysis.categories["contraction"]["time_s"]
    return [
        Finding(
            "tensor-core-precision",
            _severity(fraction),
            ["(model)"],
            {
                "precision": "fp32",
                "contraction_time_s": contraction,
                "tensor_core_dtypes": [d for d, u in spec.math.items() if u.tensor_cores],
            },
            fix,
            gain,
            fraction,
        )
    ]


def _linear_gemm_dtype(ctx) -> str:
    dtype = ctx.contraction_dtype()
    return dtype if ctx.spec.has_dtype(dtype) else "fp32"


def _misaligned_linears(ctx, vocabulary: bool):
    dtype = _linear_gemm_dtype(ctx)
    if not ctx.spec.has_dtype(dtype) or not ctx.spec.uses_tensor_cores(dtype):
        return [], dtype, 1
    need, best = ctx.spec.alignment_elements(dtype)
    vocab_sizes = {m.num_embeddings for _, m in ctx.modules_of_type(nn.Embedding)}
    found = []
    for path, layer in ctx.modules_of_type(nn.Linear):
        is_vocab = layer.out_features in vocab_sizes or layer.out_features >= 16384
        if is_vocab != vocabulary or layer.out_features % best == 0:
            continue
        time = sum(r.time_s for r in _rows_of(ctx, path))
        if _share(ctx, time) >= MIN_SHARE:
            found.append((path, layer, time))
    return found, dtype, best


@rule(
    "pad-vocabulary",
    "vocabulary (output projection) not a multiple of 8/64",
    f"{TALK}, 'Transformers': vocabulary size a multiple of 8",
    fix="pad-linear",
)
def pad_vocabulary(ctx):
    found, dtype, best = _misaligned_linears(ctx, vocabulary=True)
    finding = (
        _pad_finding(ctx, "pad-vocabulary", found, dtype, best, "vocabulary") if found else None
    )
    return [finding] if finding else []


@rule(
    "align-linear",
    "Linear features not multiples of the Tensor Core alignment",
    f"{GETTING_STARTED} §2.2; {TALK}, 'Linear layers' and the Tensor Core requirements table",
    fix="pad-linear",
)
def align_linear(ctx):
    found, dtype, best = _misaligned_linears(ctx, vocabulary=False)
    finding = (
        _pad_finding(ctx, "align-linear", found, dtype, best, "out_features") if found else None
    )
    return [finding] if finding else []


def _pad_finding(ctx, rule_id, found, dtype, best, what):
    sizes = {path: fixes._round_up(layer.out_features, best) for path, layer, _ in found}
    after = ctx.reanalyze(model=fixes.pad_linear_outputs(ctx.model, sizes))
    gain, fraction = ctx.gain_of(after)
    if gain <= 0:  # the padding costs more than the alignment saves here
        return None
    evidence = {
        path: {"out_features": layer.out_features, "padded": sizes[path], "time_s": time}
        for path, layer, time in found
    }
    fix = f"pad {what} to a multiple of {best} ({dtype} on {ctx.spec.id}): " + ", ".join(
        f"{p} {layer.out_features} -> {sizes[p]}" for p, layer, _ in found[:4]
    )
    return Finding(
        rule_id, _severity(fraction), [p for p, _, _ in found], evidence, fix, gain, fraction
    )


# -- convolutions ---------------------------------------------------------------


@rule(
    "channels-last",
    "NCHW convolutions on Tensor Cores: use channels_last (NHWC)",
    f"{TALK}, 'Convolutions' (NHWC layout)",
    fix="channels-last",
)
def channels_last_rule(ctx):
    rows = [
        r
        for r in ctx.analysis.rows
        if r.family == "conv" and any(n.startswith("NCHW") for n in r.notes)
    ]
    if not rows:
        return []
    model, inputs = fixes.channels_last(ctx.model, ctx.inputs)
    after = ctx.reanalyze(model=model, inputs=inputs)
    gain, fraction = ctx.gain_of(after)
    if gain <= 0:
        return []
    modules = sorted({r.module for r in rows})
    return [
        Finding(
            "channels-last",
            _severity(fraction),
            modules,
            {"nchw_conv_ops": len(rows), "time_s": sum(r.time_s for r in rows)},
            "model.to(memory_format=torch.channels_last) and the same for inputs",
            gain,
            fraction,
        )
    ]


@rule(
    "first-conv-channels",
    "first convolution with 3 input channels: pad to 4 or 8",
    f"{TALK}, 'Convolutions', figure 8 (C = 4 or a multiple of 8)",
    fix="pad-channels",
)
def first_conv_channels(ctx):
    convs = ctx.modules_of_type(nn.Conv2d)
    if not convs or ctx.spec.kind == "cpu":
        return []
    path, conv = convs[0]
    dtype = ctx.contraction_dtype()
    if conv.in_channels % 8 == 0 or conv.in_channels == 4 or conv.groups != 1:
        return []
    if not (ctx.spec.has_dtype(dtype) and ctx.spec.uses_tensor_cores(dtype)):
        return []
    model, inputs = fixes.channels_last(fixes.pad_first_conv(ctx.model, path, 4), ctx.inputs)
    base_model, base_inputs = fixes.channels_last(ctx.model, ctx.inputs)
    gain = ctx.reanalyze(base_model, base_inputs).time_s - ctx.reanalyze(model, inputs).time_s
    how = "re-analysed in NHWC, with and without the fourth channel"
    if gain <= 0:
        # The GEMM model prices C = 4 as a plain misaligned GEMM; cuDNN's kernels
        # specialised for it (the talk's figure 8) are outside the model.
        gain, how = (
            0.0,
            (
                "no gain predicted: dlperf's GEMM model does not know cuDNN's "
                f"kernels specialised for C = 4 (figure 8 of the {TALK})"
            ),
        )
    fraction = gain / ctx.step_time_s
    return [
        Finding(
            "first-conv-channels",
            _severity(fraction) if gain else "low",
            [path],
            {"in_channels": conv.in_channels, "padded": 4},
            f"pad {path}'s input to 4 channels in NHWC (cuDNN has kernels specialised "
            "for C = 4; or use a multiple of 8)",
            gain,
            fraction,
            how=how,
        )
    ]


@rule(
    "conv-bias-before-bn",
    "convolution bias followed by batch norm is wasted",
    f"{TALK}, 'Optimization techniques'",
    fix="drop-bias",
)
def conv_bias_before_bn(ctx):
    pairs = []
    for _path, module in ctx.model.named_modules():
        children = list(module.named_children())
        for (a, conv), (b, bn) in zip(children, children[1:], strict=False):
            if (
                isinstance(conv, nn.Conv2d)
                and conv.bias is not None
                and isinstance(bn, nn.BatchNorm2d)
            ):
                prefix = f"{_path}." if _path else ""
                pairs.append((prefix + a, prefix + b))
    if not pairs:
        return []
    after = ctx.reanalyze(model=fixes.drop_conv_bias(ctx.model, pairs))
    gain, fraction = ctx.gain_of(after)
    params = sum(ctx.model.get_submodule(c).bias.numel() for c, _ in pairs)
    return [
        Finding(
            "conv-bias-before-bn",
            _severity(fraction),
            [c for c, _ in pairs],
            {"pairs": len(pairs), "bias_parameters": params},
            "bias=False on convolutions followed by BatchNorm (the norm removes it)",
            gain,
            fraction,
            gain_memory_bytes=params * 18,
        )
    ]


# -- transformers ------------------------------------------------------------------


@rule(
    "fuse-qkv",
    "separate Q, K, V projections: concatenate them into one GEMM",
    f"{TALK}, 'Maximizing Tensor Core usage'",
    fix="fuse-qkv",
)
def fuse_qkv_rule(ctx):
    groups = fixes.qkv_groups(ctx.model)
    if not groups:
        return []
    after = ctx.reanalyze(model=fixes.fuse_qkv(ctx.model))
    gain, fraction = ctx.gain_of(after)
    if gain <= 0:
        return []
    return [
        Finding(
            "fuse-qkv",
            _severity(fraction),
            [p for p, _ in groups],
            {"attention_modules": len(groups)},
            "compute Q, K and V with one Linear of 3x the outputs and split it",
            gain,
            fraction,
        )
    ]


@rule(
    "fused-attention",
    "explicit softmax(QK^T)V: use scaled_dot_product_attention",
    f"{TALK}, 'Transformers'; flash attention moves no S x S matrix",
)
def fused_attention(ctx):
    modules = {}
    for r in ctx.analysis.rows:
        if (
            r.family == "softmax"
            and r.shapes
            and len(r.shapes[0]) >= 3
            and r.shapes[0][-1] >= 64
            and r.shapes[0][-1] == r.shapes[0][-2]
        ):
            modules.setdefault(r.module, []).append(r)
    if not modules:
        return []
    saved, evidence = 0.0, {}
    cctx = CostContext(ctx.precision, ctx.spec)
    for path, softmaxes in modules.items():
        rows = [
            r
            for r in ctx.analysis.rows
            if r.module == path
            and r.family in ("matmul", "softmax", "dropout", "elementwise")
            and r.phase != "optimizer"
        ]
        explicit = sum(r.time_s for r in rows)
        fused = 0.0
        for sm in softmaxes:
            *lead, length, _ = sm.shapes[0]
            heads = math.prod(lead)
            head_dim = 64
            q = TensorMeta(
                (1, heads, length, head_dim),
                _torch_dtype(sm.dtype),
                (heads * length * head_dim, length * head_dim, head_dim, 1),
            )
            op = (
                "aten._scaled_dot_product_flash_attention.default"
                if sm.phase == "forward"
                else "aten._scaled_dot_product_flash_attention_backward.default"
            )
            args = (q, q, q) if sm.phase == "forward" else (q, q, q, q)
            event = OpEvent(op, args, {}, (q,), path, sm.phase)
            fused += price_cost(cost_of(event, cctx), ctx.spec)[0]
        gain = max(0.0, explicit - fused)
        saved += gain
        evidence[path] = {"explicit_time_s": explicit, "fused_time_s": fused}
    fraction = saved / ctx.step_time_s
    if fraction < MIN_SHARE:
        return []
    return [
        Finding(
            "fused-attention",
            _severity(fraction),
            list(modules),
            evidence,
            "use torch.nn.functional.scaled_dot_product_attention (flash/memory-efficient)",
            saved,
            fraction,
            how="priced by the cost model: the attention rows against one fused "
            "attention op of the same shape (head size taken as 64)",
        )
    ]


def _torch_dtype(name: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name, torch.float32)


# -- quantization, bounds, latency ---------------------------------------------------


@rule(
    "gemm-quantization",
    "GEMMs losing work to tile or wave quantization",
    f"{TALK}, 'Tile quantization' and 'Wave quantization'",
)
def gemm_quantization(ctx):
    worst, saved = [], 0.0
    for r in ctx.analysis.rows:
        if r.bound != "math" or _share(ctx, r.time_s) < 0.01:
            continue
        for g in r.gemms:
            if min(g.m, g.n) < 64:  # skinny: no tile fits it, quantization is not the issue
                continue
            if not (g.waves > 1 and g.wave_efficiency < 0.75 or g.tile_efficiency < 0.75):
                continue
            dtype = g.dtype if ctx.spec.has_dtype(g.dtype) else "fp32"
            tm, tn = (int(x) for x in g.tile.split("x"))
            m2, n2 = fixes._round_up(g.m, tm), fixes._round_up(g.n, tn)
            now = gemm(g.m, g.n, g.k, dtype, ctx.spec, g.batch)
            fixed = gemm(m2, n2, g.k, dtype, ctx.spec, g.batch)
            gain = max(0.0, (now.time_s - fixed.time_s * (g.m * g.n) / (m2 * n2)) * g.count)
            if gain > 0:
                saved += gain
                worst.append((gain, r.module, g, m2, n2))
    if _share(ctx, saved) < MIN_SHARE:
        return []
    worst.sort(key=lambda item: item[0], reverse=True)
    evidence = {
        f"{module} {g.m}x{g.n}x{g.k}": {
            "tile": g.tile,
            "tile_efficiency": g.tile_efficiency,
            "waves": g.waves,
            "wave_efficiency": g.wave_efficiency,
            "suggested_mn": [m2, n2],
            "gain_s": gain,
        }
        for gain, module, g, m2, n2 in worst[:8]
    }
    fix = "; ".join(
        f"{module}: {g.m}x{g.n} -> {m2}x{n2} ({g.tile} tiles)" for _, module, g, m2, n2 in worst[:3]
    )
    fraction = _share(ctx, saved)
    return [
        Finding(
            "gemm-quantization",
            _severity(fraction),
            list(dict.fromkeys(m for _, m, _, _, _ in worst)),
            evidence,
            "make M and N multiples of the tile, or change the batch so tiles fill "
            f"whole waves: {fix}",
            saved,
            fraction,
            how="priced by the GEMM model per useful FLOP, GEMM by GEMM",
        )
    ]


@rule(
    "memory-bound-share",
    "normalization and element-wise ops take much of the step",
    f"{TALK}, operator classes (% flop vs % runtime); {MEMORY_LIMITED}, chapter 1 checklist",
)
def memory_bound_share(ctx):
    cats = ctx.analysis.categories
    total = ctx.step_time_s
    share = (cats["normalization"]["time_s"] + cats["elementwise"]["time_s"]) / total
    if share < 0.25:
        return []
    # An element-wise kernel right after a GEMM (its epilogue) or after another
    # element-wise kernel (a chain) can be fused into its producer: its input then
    # never goes through memory. Rows are in execution order.
    saved, previous = 0.0, {}
    for r in ctx.analysis.rows:
        if r.category == "elementwise" and previous.get(r.phase) in ("elementwise", "contraction"):
            saved += r.time_s
        if r.category != "view":
            previous[r.phase] = r.category
    fraction = saved / total
    if fraction < MIN_SHARE:
        return []
    return [
        Finding(
            "memory-bound-share",
            _severity(fraction),
            ["(model)"],
            {
                "normalization_and_elementwise_share": share,
                "flop_share": (cats["normalization"]["flops"] + cats["elementwise"]["flops"])
                / max(ctx.analysis.totals["flops"], 1),
            },
            "fuse element-wise chains (torch.compile, fused bias+activation, fused "
            "residual+norm kernels); at inference fold batch norm into convolutions",
            saved,
            fraction,
            how="priced as removing every element-wise kernel that directly follows a GEMM "
            "or another element-wise kernel (fused into its producer)",
        )
    ]


@rule(
    "latency-bound",
    "many tiny kernels: launch latency dominates",
    f"{TALK}, 'How to find a problem?' (latency limit)",
)
def latency_bound(ctx):
    rows = [r for r in ctx.analysis.rows if r.bound == "latency"]
    time = sum(r.time_s for r in rows)
    if _share(ctx, time) < 0.2:
        return []
    latency = ctx.spec.efficiency.kernel_latency_s
    saved = sum(min(r.time_s, latency * r.kernels) for r in rows) * 0.8
    fraction = saved / ctx.step_time_s
    return [
        Finding(
            "latency-bound",
            _severity(fraction),
            sorted({r.module for r in rows})[:10],
            {"latency_bound_ops": len(rows), "share_of_step": _share(ctx, time)},
            "capture the step in CUDA graphs or torch.compile(mode='reduce-overhead'); "
            "or grow the batch",
            saved,
            fraction,
            how="priced as removing 80% of the per-kernel launch latency",
        )
    ]


@rule(
    "small-batch",
    "batch too small for the GEMMs to be math-limited",
    f"{GETTING_STARTED} §2.1; {TALK}, 'Linear layers' (batch > 128)",
)
def small_batch(ctx):
    from ..training_memory import resize_inputs

    rows = [r for r in ctx.analysis.rows if r.category == "contraction" and r.bound != "math"]
    time = sum(r.time_s for r in rows)
    if _share(ctx, time) < 0.3 or ctx.analysis.batch >= 512:
        return []
    doubled = 2 * ctx.analysis.batch
    after = ctx.reanalyze(inputs=resize_inputs(ctx.inputs, batch=doubled))
    gain, fraction = ctx.gain_of(after, per_sample=True)
    if fraction < 0.05:
        return []
    return [
        Finding(
            "small-batch",
            _severity(fraction),
            sorted({r.module for r in rows})[:10],
            {"batch": ctx.analysis.batch, "non_math_contraction_share": _share(ctx, time)},
            f"raise the batch (x2 = {doubled}) or accumulate fewer, larger micro-batches",
            gain,
            fraction,
            how=f"re-analysed at batch {doubled}, per sample",
        )
    ]


# -- recurrent layers --------------------------------------------------------------


@rule(
    "rnn-sizes",
    "recurrent layer sizes: alignment and persistent kernels",
    f"{RECURRENT}, chapter 1 checklist and chapter 5 (persistence)",
)
def rnn_sizes(ctx):
    from ..ops.rnn import PERSISTENT_MAX_HIDDEN

    findings = []
    for r in ctx.analysis.rows:
        if r.family != "rnn" or r.phase != "forward":
            continue
        layer = ctx.model.get_submodule(r.module) if r.module else ctx.model
        hidden = layer.hidden_size
        batch = next((g.n for g in r.gemms if g.role == "recurrent forward"), 0)
        dtype = r.dtype
        advice = []
        if dtype == "fp16":
            target = fixes._round_up(hidden, 32)
            limit = PERSISTENT_MAX_HIDDEN.get(layer.mode, 1024)
            if hidden % 32:
                note = "for Tensor Cores and the persistent kernel"
                if target > limit:
                    note = "for Tensor Cores"
                advice.append(f"hidden size {hidden} -> {target} ({note})")
            if batch % 8:
                advice.append(f"minibatch {batch} -> {fixes._round_up(batch, 8)}")
        elif dtype in ("fp32", "tf32"):
            advice.append("train in fp16 (AMP): Tensor Cores and persistent RNN kernels")
            if hidden % 4:
                advice.append(f"hidden size {hidden} -> {fixes._round_up(hidden, 4)}")
        if advice:
            findings.append(
                Finding(
                    "rnn-sizes",
                    "medium",
                    [r.module],
                    {"hidden_size": hidden, "minibatch": batch, "dtype": dtype},
                    "; ".join(advice),
                    0.0,
                    0.0,
                    how="a size change alters the model: no gain is predicted",
                )
            )
    return findings


# -- memory and settings -----------------------------------------------------------


@rule(
    "memory-fit",
    "the training step does not fit in GPU memory",
    f"{TALK}, 'GPU memory', 'Gradient accumulation', 'Activation recompute'",
)
def memory_fit(ctx):
    if not ctx.training:
        return []
    from ..training_memory import memory_report

    report = memory_report(ctx.run, ctx.session)
    if report.fits:
        return []
    options = []
    for p in report.policies:
        if p["fits"]:
            options.append(
                f"checkpoint {p['checkpoint']} (peak {p['peak_bytes'] / 2**30:.1f} GiB,"
                f" +{p['recompute_s'] * 1e3:.0f} ms recompute)"
            )
    options.append("8-bit Adam (2 B/param of states instead of 8)")
    options.append("ZeRO/FSDP over several GPUs (`dlperf plan`)")
    return [
        Finding(
            "memory-fit",
            "high",
            ["(model)"],
            {"peak_bytes": report.peak_bytes, "capacity_bytes": report.capacity_bytes},
            "; ".join(options),
            0.0,
            0.0,
            gain_memory_bytes=report.peak_bytes - report.capacity_bytes,
            how="dlperf memory, per option",
        )
    ]


@rule(
    "precision-settings",
    "precision settings: loss scaling and bf16",
    f"{TALK}, 'Mixed precision training': 'How to use it?' (GradScaler), 'A note on data types'",
)
def precision_settings(ctx):
    name = ctx.precision.name
    findings = []
    bf16 = ctx.spec.has_dtype("bf16") and ctx.spec.uses_tensor_cores("bf16")
    if name in ("amp-fp16", "fp16") and ctx.training:
        fix = "scale the loss with torch.amp.GradScaler"
        if bf16:
            fix += f"; or use {'amp-bf16' if name == 'amp-fp16' else 'bf16'}: same speed on "
            fix += f"{ctx.spec.id}, fp32's range, no scaler"
        findings.append(
            Finding(
                "precision-settings",
                "low",
                ["(model)"],
                {"precision": name},
                fix,
                how="a setting: no time change predicted",
            )
        )
    if any(r.family == "conv" for r in ctx.analysis.rows):
        findings.append(
            Finding(
                "precision-settings",
                "low",
                ["(model)"],
                {"convolutions": True},
                "set torch.backends.cudnn.benchmark = True for static shapes",
                how="a setting: no time change predicted",
            )
        )
    return findings


# -- hierarchical models -------------------------------------------------------------


def _early(ctx, fraction: float = 1 / 3) -> set[str]:
    """Modules whose forward runs in the first third of the step's forward ops."""
    forward = [r for r in ctx.analysis.rows if r.phase == "forward" and r.module]
    cut = int(len(forward) * fraction)
    return {r.module for r in forward[:cut]}


@rule(
    "early-layers",
    "memory-limited early layers: depthwise, squeeze-excite, layer norm",
    f"{TALK}, 'Recommendations for hierarchical models'",
)
def early_layers(ctx):
    early = _early(ctx)
    kinds = {
        "depthwise convolution": lambda r: r.family == "conv-depthwise",
        "squeeze-and-excitation pooling": lambda r: (
            r.family == "pooling" and r.op.startswith("aten._adaptive_avg_pool") and "." in r.module
        ),
        "layer norm": lambda r: r.family == "layer_norm",
    }
    findings = []
    for kind, match in kinds.items():
        rows = [r for r in ctx.analysis.rows if r.module in early and match(r)]
        time = sum(r.time_s for r in rows)
        if _share(ctx, time) < 0.02:
            continue
        fix = {
            "depthwise convolution": "use dense convolutions in the early, memory-limited "
            "layers (depthwise is fine later, where layers are math-limited)",
            "squeeze-and-excitation pooling": "drop squeeze-and-excitation from the early "
            "layers; keep it where the layers are math-limited",
            "layer norm": "avoid layer norm in the early layers (batch norm folds into the "
            "convolution at inference)",
        }[kind]
        findings.append(
            Finding(
                "early-layers",
                _severity(_share(ctx, time)),
                sorted({r.module for r in rows})[:8],
                {"kind": kind, "time_s": time, "share": _share(ctx, time)},
                fix,
                how="an architecture change: the share of the step these "
                "ops take is shown, no gain is predicted",
            )
        )
    return findings


@rule(
    "relu-fusion",
    "activation after conv + batch norm that cannot fuse: prefer ReLU",
    f"{TALK}, hierarchical models: 'ReLU is the best activation as it can be fused with conv-BN'",
)
def relu_fusion(ctx):
    found = []
    for path, module in ctx.model.named_modules():
        children = list(module.named_children())
        for (_a, conv), (_, bn), (c, act) in zip(
            children, children[1:], children[2:], strict=False
        ):
            if (
                isinstance(conv, nn.Conv2d)
                and isinstance(bn, nn.BatchNorm2d)
                and isinstance(act, (nn.SiLU, nn.GELU, nn.Hardswish, nn.Mish, nn.ELU))
            ):
                prefix = f"{path}." if path else ""
                found.append((prefix + c, type(act).__name__))
    if not found:
        return []
    time = sum(r.time_s for r in ctx.analysis.rows for p, _ in found if r.module == p)
    return [
        Finding(
            "relu-fusion",
            _severity(_share(ctx, time)),
            [p for p, _ in found][:8],
            {"activations": sorted({k for _, k in found}), "count": len(found), "time_s": time},
            "ReLU after conv + batch norm fuses into one kernel (TensorRT, cuDNN "
            "fusions); other activations need a pass of their own",
            how="an architecture change: no gain is predicted",
        )
    ]
