"""A Megatron-LM argument list (`pretrain_gpt.py --num-layers ...`), as a
file: the arguments as a launch script passes them (line continuations,
comments and the launcher before them are skipped).

The model is built from its sizes: with `--swiglu` (and RMSNorm, rotary
positions) as a Llama-shaped decoder, otherwise as GPT (learned positions,
LayerNorm, GELU). `--use-flash-attn` runs flash-attn 2's kernel (`--attention flash`); without it
Megatron's own core attention (batched GEMMs around its fused
scale-mask-softmax) is priced as the model's explicit attention
(`--attention eager`). Its fused bias-GELU (the tanh form) is one kernel:
GPT-2's `gelu_pytorch_tanh`, not the chain of point-wise ops of `gelu_new`.
`--use-distributed-optimizer` shards the optimizer states over the
data-parallel ranks (ZeRO-1); gradients are reduced in fp32 unless
`--accumulate-allreduce-grads-in-fp32` is off and bf16 is on.
`--cross-entropy-loss-fusion` is `--loss fused`, `--cpu-offloading` with
`--cpu-offloading-num-layers N` `--offload-layers N`, and
`--overlap-moe-expert-parallel-comm` `--overlap-ep-comm`; `--cuda-graph-impl`
(and the older `--enable-cuda-graph`, `--external-cuda-graph`) is
`--cuda-graphs`, with `--cuda-graph-scope`'s modules as `--cuda-graph-scope`
(the whole step for full_iteration or no modules).

Mixtures of experts (`--num-experts`, Llama-shaped only): every layer's MLP
is `--num-experts` SwiGLU experts of `--moe-ffn-hidden-size`, `--moe-router-topk`
a token, built as Mixtral's layer; with `--qk-layernorm` as Qwen3-MoE's, and
with `--moe-shared-expert-intermediate-size` as Qwen2-MoE's (its shared expert's
one-output gate and the attention's biases are a fraction of a percent of the
layer). `--expert-model-parallel-size` is `--ep`; the flex dispatcher
(`--moe-token-dispatcher-type flex`, `--moe-enable-deepep`, a DeepEP or
HybridEP backend) `--moe-dispatcher flex`. dlperf prices balanced routing, so
the router's own settings are listed as changing nothing.
"""

from __future__ import annotations

from ..checkpointing import ATTENTION_CORE, RECOMPUTE_MODULES
from .job import Job, bad, shell_words

# flag -> whether it takes a value
FLAGS_WITH_VALUES = {
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
    "--num-query-groups", "--seq-length", "--max-position-embeddings",
    "--micro-batch-size", "--global-batch-size", "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--num-experts", "--moe-router-topk",
    "--moe-ffn-hidden-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--num-layers-per-virtual-pipeline-stage",
    "--vocab-size", "--padded-vocab-size", "--normalization", "--position-embedding-type",
    "--optimizer", "--kv-channels", "--cpu-offloading-num-layers",
    "--expert-tensor-parallel-size", "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq", "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend",
    "--cuda-graph-impl",
}  # fmt: skip
SWITCHES = {
    "--sequence-parallel", "--bf16", "--fp16", "--use-flash-attn", "--swiglu",
    "--group-query-attention", "--use-distributed-optimizer",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--accumulate-allreduce-grads-in-fp32", "--use-mcore-models", "--transformer-impl",
    "--overlap-grad-reduce", "--overlap-param-gather", "--fp8-format", "--cpu-offloading",
    "--overlap-moe-expert-parallel-comm", "--cross-entropy-loss-fusion", "--qk-layernorm",
    "--moe-grouped-gemm", "--moe-enable-deepep", "--moe-permute-fusion", "--moe-router-fusion",
    "--moe-router-force-load-balancing", "--moe-router-pre-softmax",
    "--moe-router-enable-expert-bias", "--moe-shared-expert-overlap",
    "--moe-pad-expert-input-to-capacity", "--enable-cuda-graph", "--external-cuda-graph",
}  # fmt: skip
# The router's settings: which experts a token goes to, which dlperf takes as balanced.
ROUTER_PREFIXES = (
    "--moe-router-", "--moe-aux-loss", "--moe-z-loss", "--moe-expert-capacity-factor",
    "--moe-token-drop-policy", "--moe-pad-expert-input-to-capacity", "--moe-input-jitter",
)  # fmt: skip
# How Megatron fuses and overlaps around the experts, which dlperf prices as its default.
MOE_BUILD = ("--moe-permute-fusion", "--moe-router-fusion", "--moe-shared-expert-overlap")
FLEX_BACKENDS = ("deepep", "hybridep")
DISPATCH_FLAGS = ("--moe-token-dispatcher-type", "--moe-enable-deepep",
                  "--moe-flex-dispatcher-backend")  # fmt: skip
# Flags that take a list of values (argparse's nargs="+"): every word up to the next flag.
LIST_FLAGS = {"--recompute-modules", "--cuda-graph-scope"}
# Megatron-Core's --cuda-graph-scope modules: "moe" graphs the whole MoE layer
# (its experts included: a dropless run cannot), the others the parts they name.
CUDA_GRAPH_SCOPES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")
# Megatron's CUDA graph implementations that capture anything
GRAPH_IMPLS = ("local", "transformer_engine", "full_iteration")
# Flags that change no step's time or memory (training length, data, logging ...).
BOOKKEEPING_PREFIXES = (
    "--train-", "--lr", "--min-lr", "--weight-decay", "--adam-", "--init-",
    "--data-", "--split", "--tokenizer-", "--vocab-file", "--merge-file", "--save",
    "--load", "--log-", "--eval-", "--tensorboard", "--wandb", "--seed", "--distributed-",
    "--exit-", "--no-", "--attention-dropout", "--hidden-dropout", "--override-",
)  # fmt: skip
GPT2_VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128, as Megatron pads it


def looks_like(text: str) -> bool:
    return "--num-layers" in text and "--hidden-size" in text


LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
# torchrun's arguments that say where its processes meet, not how many
LAUNCH_PLACES = (
    "--node_rank", "--node-rank", "--master_addr", "--master-addr", "--master_port",
    "--master-port", "--rdzv", "--max_restarts", "--max-restarts", "--standalone", "--role",
    "--log", "--redirects", "--tee",
)  # fmt: skip


def _arguments(text: str, path: str) -> tuple[list[str], list[str]]:
    """(the training script's arguments, the launcher's before the script)."""
    words = shell_words(text, path)
    # after the training script (`torchrun ... pretrain_gpt.py --num-layers ...`),
    # else from the first flag
    script = [i for i, w in enumerate(words) if w.endswith(".py")]
    start = script[-1] + 1 if script else 0
    first = next((i for i, w in enumerate(words[start:], start) if w.startswith("--")), len(words))
    before = words[: script[-1]] if script else []
    launcher = next((i for i, w in enumerate(before) if w.split("/")[-1] in LAUNCHERS), None)
    return words[first:], ([] if launcher is None else before[launcher + 1 :])


def _launcher(job: Job, words: list[str], path: str) -> None:
    """torchrun's --nproc_per_node and --nnodes: the GPUs the job runs on
    (`job.gpus`, `job.gpus_per_node`); its other arguments listed as ignored."""
    pairs, i = {}, 0
    while i < len(words):
        word = words[i]
        if "=" in word:
            flag, value = word.split("=", 1)
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("-"):
            flag, value = word, words[i + 1]
            i += 2
        else:
            flag, value = word, True
            i += 1
        pairs[flag.replace("-", "_").lstrip("_")] = (flag, value)
    counts = {}
    for key in ("nproc_per_node", "nnodes"):
        if key not in pairs:
            continue
        flag, value = pairs.pop(key)
        if isinstance(value, str) and value.isdigit() and int(value) > 0:
            counts[key] = int(value)
        elif isinstance(value, str) and value.startswith("$"):
            why = "a shell variable dlperf cannot read: give --gpus"
            job.ignore(f"torchrun {flag}", value, why)
        else:
            raise bad(path, f"torchrun {flag}", f"expected a positive whole number, got {value!r}")
    if "nproc_per_node" in counts:
        per_node, nodes = counts["nproc_per_node"], counts.get("nnodes", 1)
        job.gpus, job.gpus_per_node = per_node * nodes, per_node
        job.use("torchrun --nproc_per_node", per_node, f"--gpus-per-node {per_node}")
        if "nnodes" in counts:
            job.use("torchrun --nnodes", nodes, f"--gpus {job.gpus} ({nodes} x {per_node})")
    elif "nnodes" in counts:
        job.ignore("torchrun --nnodes", counts["nnodes"], "without --nproc_per_node: give --gpus")
    for flag, value in pairs.values():
        if flag.startswith(LAUNCH_PLACES):
            job.ignore(f"torchrun {flag}", value, "where the processes meet: changes no step")
        else:
            why = "unknown field: not a torchrun argument dlperf knows"
            job.ignore(f"torchrun {flag}", value, why)


def read(text: str, path: str, gpus: int | None) -> Job:
    job = Job("megatron", path)
    (words, launcher), args = _arguments(text, path), {}
    _launcher(job, launcher, path)
    gpus = gpus or job.gpus
    i = 0
    while i < len(words):
        flag = words[i]
        if not flag.startswith("--"):
            raise bad(path, flag, "a value without its flag")
        if flag in LIST_FLAGS:
            end = next((j for j in range(i + 1, len(words)) if words[j].startswith("--")),
                       len(words))  # fmt: skip
            args[flag] = " ".join(words[i + 1 : end])
            i = end
            continue
        takes = flag in FLAGS_WITH_VALUES or (
            flag not in SWITCHES and i + 1 < len(words) and not words[i + 1].startswith("--")
        )
        value = words[i + 1] if takes and i + 1 < len(words) else True
        args[flag] = value
        i += 2 if takes else 1
    _model(job, args, path)
    _run(job, args, path, gpus)
    for flag, value in args.items():
        if any(f.name == flag for f in job.fields):
            continue
        if flag.startswith(BOOKKEEPING_PREFIXES):
            job.ignore(flag, value, "changes no step's time or memory")
        else:
            job.ignore(flag, value, "unknown field: not a Megatron-LM flag dlperf knows")
    return job


def _int(args: dict, flag: str, path: str, default: int | None = None) -> int | None:
    value = args.get(flag, default)
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise bad(path, flag, f"expected a whole number, got {value!r}") from None
    if number <= 0:
        raise bad(path, flag, f"expected a positive number, got {number}")
    return number


def _model(job: Job, args: dict, path: str) -> None:
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length"):
        if flag not in args:
            raise bad(path, flag, "missing: the model's size needs it")
    layers, hidden = _int(args, "--num-layers", path), _int(args, "--hidden-size", path)
    heads, seq = _int(args, "--num-attention-heads", path), _int(args, "--seq-length", path)
    vocab = _int(args, "--padded-vocab-size", path) or _int(args, "--vocab-size", path)
    vocab = vocab or GPT2_VOCAB
    positions = _int(args, "--max-position-embeddings", path, seq)
    swiglu = "--swiglu" in args
    ffn = _int(args, "--ffn-hidden-size", path) or (
        int(8 * hidden / 3 / 64 + 0.999) * 64 if swiglu else 4 * hidden
    )
    groups = _int(args, "--num-query-groups", path) if "--group-query-attention" in args else heads
    head_dim = _int(args, "--kv-channels", path)
    if swiglu:
        sizes = (
            f"hidden_size={hidden},num_hidden_layers={layers},"
            f"num_attention_heads={heads},num_key_value_heads={groups},"
            f"vocab_size={vocab},max_position_embeddings={positions}"
        ) + (f",head_dim={head_dim}" if head_dim else "")
        experts = _experts(job, args, path, sizes, ffn)
        spec = experts or f"hf:llama:{sizes},intermediate_size={ffn}"
    else:
        if head_dim and head_dim * heads != hidden:
            why = f"{head_dim} x {heads} heads is not --hidden-size {hidden}, as GPT's attention"
            raise bad(path, "--kv-channels", f"{why} needs; add --swiglu or drop it")
        if "--num-experts" in args:
            raise bad(path, "--num-experts", "experts are read for Llama-shaped models only "
                      "(--swiglu): give hf: an MoE")  # fmt: skip
        spec = (
            f"hf:gpt2:n_embd={hidden},n_layer={layers},n_head={heads},n_inner={ffn},"
            f"vocab_size={vocab},n_positions={positions},attn_pdrop=0,resid_pdrop=0,"
            "embd_pdrop=0,activation_function=gelu_pytorch_tanh"
        )
    job.model = spec
    shape = "a Llama-shaped decoder (SwiGLU)" if swiglu else "GPT (GELU, learned positions)"
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
                 "--num-query-groups", "--group-query-attention", "--max-position-embeddings",
                 "--vocab-size", "--padded-vocab-size", "--swiglu", "--normalization",
                 "--position-embedding-type", "--kv-channels", "--disable-bias-linear",
                 "--untie-embeddings-and-output-weights"):  # fmt: skip
        if flag in args:
            job.use(flag, args[flag], f"the model's size: {shape}")
    job.options["seq_len"] = seq
    job.use("--seq-length", seq, f"--seq-len {seq}")


def _experts(job: Job, args: dict, path: str, sizes: str, ffn: int) -> str | None:
    """The model spec of a Llama-shaped MoE (None without --num-experts)."""
    experts = _int(args, "--num-experts", path)
    if not experts:
        return None
    freq = str(args.get("--moe-layer-freq", "1"))
    if freq != "1":
        raise bad(path, "--moe-layer-freq", f"{freq!r}: only every layer an MoE layer (1) is read; "
                  "give hf: a model with dense layers")  # fmt: skip
    top_k = _int(args, "--moe-router-topk", path, 2)
    if top_k > experts:
        raise bad(path, "--moe-router-topk", f"{top_k} is more than the {experts} experts")
    expert_ffn = _int(args, "--moe-ffn-hidden-size", path, ffn)
    shared = _int(args, "--moe-shared-expert-intermediate-size", path)
    if shared:
        kind = "Qwen2-MoE's layer (with its shared expert)"
        spec = (
            f"hf:qwen2_moe:{sizes},num_experts={experts},num_experts_per_tok={top_k},"
            f"moe_intermediate_size={expert_ffn},shared_expert_intermediate_size={shared}"
        )
        if "--qk-layernorm" in args:
            job.ignore("--qk-layernorm", True, "Qwen2-MoE's layer has no q/k norm: not priced")
    elif "--qk-layernorm" in args:
        kind = "Qwen3-MoE's layer (q/k norms)"
        spec = (
            f"hf:qwen3_moe:{sizes},num_experts={experts},num_experts_per_tok={top_k},"
            f"moe_intermediate_size={expert_ffn}"
        )
    else:
        kind = "Mixtral's layer"
        spec = (
            f"hf:mixtral:{sizes},num_local_experts={experts},num_experts_per_tok={top_k},"
            f"intermediate_size={expert_ffn}"
        )
    said = f"{experts} experts of {expert_ffn}, {top_k} a token: {kind}"
    for flag in ("--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
                 "--moe-shared-expert-intermediate-size", "--moe-layer-freq"):  # fmt: skip
        if flag in args:
            job.use(flag, args[flag], said)
    if "--moe-grouped-gemm" in args:
        job.use("--moe-grouped-gemm", True, "the experts' GEMMs grouped, as dlperf prices them")
    for flag in MOE_BUILD:
        if flag in args:
            job.ignore(flag, args[flag], "how Megatron fuses or overlaps: its default priced")
    for flag, value in args.items():
        if flag.startswith(ROUTER_PREFIXES) and not any(f.name == flag for f in job.fields):
            job.ignore(flag, value, "how the router picks experts: dlperf prices balanced routing")
    return spec


def _dispatcher(job: Job, args: dict, path: str, ep: int) -> str | None:
    """--moe-dispatcher from Megatron's token dispatcher flags."""
    kind = str(args.get("--moe-token-dispatcher-type", "allgather"))
    backend = args.get("--moe-flex-dispatcher-backend")
    if "--moe-enable-deepep" in args or backend in FLEX_BACKENDS:
        kind = "flex"
    if kind not in ("allgather", "alltoall", "flex"):
        raise bad(path, "--moe-token-dispatcher-type",
                  f"expected allgather, alltoall or flex, got {kind!r}")  # fmt: skip
    if kind == "allgather":
        if ep > 1:  # Megatron's default: say so even where the flag is not written
            job.ignore("--moe-token-dispatcher-type", "allgather", "dlperf has no all-gather "
                       "dispatcher: priced as alltoall (give alltoall or flex)")  # fmt: skip
        return None
    for flag in DISPATCH_FLAGS:
        if flag in args:
            job.use(flag, args[flag], f"--moe-dispatcher {kind}")
    return kind


def _run(job: Job, args: dict, path: str, gpus: int | None) -> None:
    # in this order: the fields are listed as they were read
    _batch_and_precision(job, args, path)
    _parallel(job, args, path, gpus)
    _recompute(job, args, path)
    optimizer = str(args.get("--optimizer", "adam"))
    job.options["optimizer"] = "sgd-momentum" if optimizer == "sgd" else "adamw"
    if "--optimizer" in args:
        job.use("--optimizer", optimizer, f"--optimizer {job.options['optimizer']}")
    _fusions_and_offload(job, args, path)
    _cuda_graphs(job, args, path)
    for flag in ("--use-mcore-models", "--transformer-impl", "--overlap-grad-reduce",
                 "--overlap-param-gather", "--accumulate-allreduce-grads-in-fp32"):  # fmt: skip
        if flag in args:
            job.ignore(flag, args[flag], "how Megatron overlaps or builds: its default priced")


def _fusions_and_offload(job: Job, args: dict, path: str) -> None:
    """The fused cross-entropy, activation offloading and the experts'
    all-to-all overlap: each an option of dlperf's."""
    if "--cross-entropy-loss-fusion" in args:
        job.options["loss"] = "fused"
        job.use("--cross-entropy-loss-fusion", True, "--loss fused")
    if "--cpu-offloading" in args:
        layers = _int(args, "--cpu-offloading-num-layers", path, 0)
        job.parallel["offload_layers"] = layers
        for flag in ("--cpu-offloading", "--cpu-offloading-num-layers"):
            if flag in args:
                job.use(flag, args[flag], f"--offload-layers {layers}")
    elif "--cpu-offloading-num-layers" in args:
        job.ignore("--cpu-offloading-num-layers", args["--cpu-offloading-num-layers"],
                   "without --cpu-offloading Megatron offloads nothing")  # fmt: skip
    if "--overlap-moe-expert-parallel-comm" in args:
        job.parallel["overlap_ep_comm"] = True
        job.use("--overlap-moe-expert-parallel-comm", True, "--overlap-ep-comm")


def _cuda_graphs(job: Job, args: dict, path: str) -> None:
    """--cuda-graph-impl (or the older --enable-cuda-graph, --external-cuda-graph)
    as --cuda-graphs, and --cuda-graph-scope's modules as --cuda-graph-scope: the
    whole step where the scope is full, empty or a whole iteration."""
    impl = str(args.get("--cuda-graph-impl", "none"))
    if impl not in ("none", *GRAPH_IMPLS):
        raise bad(path, "--cuda-graph-impl",
                  f"expected none, {', '.join(GRAPH_IMPLS)}, got {impl!r}")  # fmt: skip
    older = [f for f in ("--enable-cuda-graph", "--external-cuda-graph") if f in args]
    if impl == "none" and not older:
        if "--cuda-graph-scope" in args:
            job.ignore("--cuda-graph-scope", args["--cuda-graph-scope"], "no CUDA graphs")
        return
    words = str(args.get("--cuda-graph-scope", "")).split()
    known = [w for w in words if w in CUDA_GRAPH_SCOPES]
    whole = impl == "full_iteration" or not known or any(w.startswith("full") for w in words)
    scope = "full" if whole else "+".join(known)
    job.options["cuda_graphs"] = True
    job.parallel["cuda_graph_scope"] = scope
    for flag in ("--cuda-graph-impl", *older):
        if flag in args:
            job.use(flag, args[flag], f"--cuda-graphs --cuda-graph-scope {scope}")
    if words:
        others = [w for w in words if w not in CUDA_GRAPH_SCOPES and not w.startswith("full")]
        if others:
            job.ignore("--cuda-graph-scope", " ".join(words), f"{', '.join(others)}: no such "
                       f"module in dlperf's models; --cuda-graph-scope {scope}")  # fmt: skip
        else:
            job.use("--cuda-graph-scope", " ".join(words), f"--cuda-graph-scope {scope}")


def _batch_and_precision(job: Job, args: dict, path: str) -> None:
    """The micro- and global batch, the precision, clipping and attention."""
    micro = _int(args, "--micro-batch-size", path, 1)
    job.micro_batch = micro
    job.use("--micro-batch-size", micro, f"micro-batch {micro} per GPU")
    if "--global-batch-size" in args:
        job.global_batch = _int(args, "--global-batch-size", path)
        job.use("--global-batch-size", job.global_batch, f"--global-batch {job.global_batch}")
    precision = "amp-bf16" if "--bf16" in args else ("amp-fp16" if "--fp16" in args else "fp32")
    job.options["precision"] = precision
    for flag in ("--bf16", "--fp16"):
        if flag in args:
            job.use(flag, True, f"--precision {precision} (fp32 main weights and gradients)")
    if "--clip-grad" in args:
        job.clip_grad("--clip-grad", args["--clip-grad"])
    else:
        job.options["clip_grad"] = True  # Megatron-LM clips at 1.0 unless told
    # --use-flash-attn calls flash-attn 2's own kernel (FlashAttention-2 on every GPU
    # it runs on, Hopper included: FA3 is another package), not PyTorch's choice
    attention = "flash" if "--use-flash-attn" in args else "eager"
    job.options["attention"] = attention
    if "--use-flash-attn" in args:
        job.use("--use-flash-attn", True, "--attention flash (flash-attn 2's kernel)")


def _parallel(job: Job, args: dict, path: str, gpus: int | None) -> None:
    """tp, pp, cp, the sharding, sequence parallelism and the pipeline schedule;
    dp from the GPU count."""
    tp = _int(args, "--tensor-model-parallel-size", path, 1)
    pp = _int(args, "--pipeline-model-parallel-size", path, 1)
    cp = _int(args, "--context-parallel-size", path, 1)
    plan: dict = {"tp": tp, "pp": pp, "cp": cp}
    plan["sharding"] = "zero1" if "--use-distributed-optimizer" in args else "none"
    plan["sequence_parallel"] = "--sequence-parallel" in args and tp > 1
    ep = _int(args, "--expert-model-parallel-size", path, 1)
    if ep > 1:
        if "--num-experts" not in args:
            raise bad(path, "--expert-model-parallel-size", "needs --num-experts: "
                      "expert parallelism splits the experts")  # fmt: skip
        plan["ep"] = ep
        dispatcher = _dispatcher(job, args, path, ep)
        if dispatcher:
            plan["moe_dispatcher"] = dispatcher
    else:  # no expert parallelism: no token leaves its GPU, whatever dispatches them
        for flag in ("--expert-model-parallel-size", *DISPATCH_FLAGS):
            if flag in args:
                job.ignore(flag, args[flag], "expert parallelism 1: no token is dispatched")
    chunks = _int(args, "--num-layers-per-virtual-pipeline-stage", path)
    if pp > 1:
        layers = _int(args, "--num-layers", path)
        v = layers // (pp * chunks) if chunks else 1
        plan["schedule"] = f"interleaved:{v}" if v > 1 else "1f1b"
    if gpus:
        if gpus % (tp * pp * cp):
            raise bad(path, "parallel sizes", f"{gpus} GPUs do not divide into tp x pp x cp")
        plan["dp"] = gpus // (tp * pp * cp)
    job.parallel = plan
    said = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in plan.items())
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--context-parallel-size", "--sequence-parallel", "--use-distributed-optimizer",
                 "--num-layers-per-virtual-pipeline-stage",
                 "--expert-model-parallel-size"):  # fmt: skip
        if flag in args:
            job.use(flag, args[flag], said)
    _expert_tp(job, args, path, plan)


def _expert_tp(job: Job, args: dict, path: str, plan: dict) -> None:
    """--expert-tensor-parallel-size against the one dlperf's layout runs
    (`parallel.layout.Layout.expert_tp`): tp where ep divides dp, 1 where the
    expert-parallel group spans the tp GPUs."""
    if "--expert-tensor-parallel-size" not in args:
        return
    given = _int(args, "--expert-tensor-parallel-size", path)
    dp, ep, tp = plan.get("dp"), plan.get("ep", 1), plan["tp"]
    if dp is None:
        job.ignore("--expert-tensor-parallel-size", given, "the layout needs the GPU count: "
                   "give --gpus")  # fmt: skip
        return
    runs = tp if dp % ep == 0 else 1
    if given == runs:
        job.use("--expert-tensor-parallel-size", given, f"expert tensor parallelism {runs} "
                f"(ep {ep} over dp {dp} x tp {tp})")  # fmt: skip
    else:
        raise bad(path, "--expert-tensor-parallel-size", f"{given}: dlperf runs {runs} at ep {ep}, "
                  f"dp {dp}, tp {tp} (tp where ep divides dp, 1 where ep spans the tp GPUs); "
                  "drop it or change ep")  # fmt: skip


def _recompute_modules(job: Job, modules: str) -> str:
    """The policy of selective recompute over `modules` (Megatron's
    --recompute-modules): dlperf's selective:A+B over the ones it prices
    (`checkpointing.RECOMPUTE_MODULES`), none where it prices none of them;
    the others listed as not priced."""
    names = list(dict.fromkeys(modules.split()))
    priced = [m for m in names if m in RECOMPUTE_MODULES]
    others = [m for m in names if m not in RECOMPUTE_MODULES]
    policy = "selective:" + "+".join(priced) if priced else "none"
    if policy == f"selective:{ATTENTION_CORE}":
        policy = "selective"
    if others:
        why = f"recompute of {', '.join(others)} not priced"
        job.ignore("--recompute-modules", modules, f"{why}: --checkpoint {policy}")
    else:
        job.use("--recompute-modules", modules, f"--checkpoint {policy}")
    return policy


def _recompute(job: Job, args: dict, path: str) -> None:
    """The activation checkpointing policy of --recompute-granularity and its method."""
    granularity = args.get("--recompute-granularity")
    if granularity:
        policy = {"full": "full", "selective": "selective"}.get(str(granularity))
        if policy is None:
            raise bad(
                path, "--recompute-granularity", f"expected full or selective, got {granularity!r}"
            )
        method = args.get("--recompute-method")
        if policy == "full" and method == "uniform":  # chunks of k layers, inputs kept
            k = _int(args, "--recompute-num-layers", path, 1)
            policy = "full" if k == 1 else f"every:{k}"
        elif policy == "full" and method == "block":  # only the first k layers of a stage
            job.ignore("--recompute-method", method, "block: priced as every layer recomputed")
        if policy == "selective" and "--recompute-modules" in args:
            policy = _recompute_modules(job, str(args["--recompute-modules"]))
        job.options["checkpoint"] = policy
        job.use("--recompute-granularity", granularity, f"--checkpoint {policy}")
        for flag in ("--recompute-method", "--recompute-num-layers"):
            if flag in args:
                job.use(flag, args[flag], f"read with --recompute-granularity: {policy}")
    if "--recompute-modules" in args and str(granularity) != "selective":
        why = "read with --recompute-granularity selective only, as Megatron reads it"
        job.ignore("--recompute-modules", args["--recompute-modules"], why)
