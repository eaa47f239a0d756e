"""What each verb does, and only that: resolve its run, call the public API,
and hand the result to a renderer (`rendering.output.show`: one JSON document
with --json, else the terminal rendering). Nothing here prints.

The API is imported inside each handler: a verb loads only what it runs.
"""

from __future__ import annotations

from argparse import Namespace

from ..errors import DlperfError
from ..rendering import terminal as text
from ..rendering.output import show
from ..rendering.progress import Spinner
from ..run_config import RunConfig
from .files import read_interconnect, writable_file, writable_folder, write_interconnect
from .options import byte_sizes, device_settings, run_config, run_options


def cmd_gpus(args: Namespace) -> None:
    from ..hardware import gpu, gpus

    if args.spec:
        spec = gpu(args.spec)  # a spec file, or a catalogue GPU by name
        return show(spec, text.spec_report, args.json, document=text.spec_document)
    show(gpus(), text.gpus_table, args.json, document=text.gpus_document)


def cmd_models(args: Namespace) -> None:
    from ..models.hub import models_document

    models = models_document()
    show(models, text.models_table, args.json, document=lambda m: {"models": m})


def cmd_explain_config(args: Namespace) -> None:
    from ..configs import read_config

    job = read_config(args.file, gpus=args.gpus)
    verb = "serve" if job.serving else "plan" if job.parallel else "analyze"
    run = RunConfig.build(**job.run_options(verb)).described()
    show(job, text.explain_config, args.json, document=lambda j: {**j.to_dict(), "run_config": run},
         run_config=run)  # fmt: skip


def cmd_gemm(args: Namespace) -> None:
    from ..kernels.gemm import gemm
    from ..run import device_spec
    from ..run_config import DeviceConfig

    if args.cuda_context is not None:
        raise DlperfError("--cuda-context is memory; gemm prices one kernel's time: drop it")
    spec = device_spec(DeviceConfig(args.gpu, args.power_limit, args.torch_version))
    result = gemm(args.m, args.n, args.k, dtype=args.dtype, gpu=spec, batch=args.batch)
    show(result, text.gemm_report, args.json)


def cmd_analyze(args: Namespace) -> None:
    from ..api import analyze

    with Spinner(f"tracing {args.model}", quiet=args.json) as progress:
        result = analyze(None, run_config(args), progress=progress)
    run = None
    if args.steps or args.tokens or args.price_per_gpu_hour is not None:
        run = result.run_totals(args.steps, args.tokens, args.price_per_gpu_hour)
    show(result, text.analysis_report, args.json, document=_at_depth(args.depth, run),
         top=args.top, depth=args.depth, run=run)  # fmt: skip


def _at_depth(depth: int, run: dict | None = None):
    """The analysis's JSON with its modules at --depth, as the table shows them,
    and the run's totals when asked (--steps, --tokens, --price-per-gpu-hour)."""
    return lambda a: {**a.to_dict(), "modules": a.modules(depth=depth), "run": run}


def _top_plans(top: int):
    """The plan report's JSON with its first --top plans (the design's contract)."""
    return lambda r: {**r.to_dict(), "plans": [p.to_dict() for p in r.plans[:top]]}


def _training_only(args: Namespace, verb: str, what: str) -> None:
    if getattr(args, "train", True) is False:
        raise DlperfError(
            f"--infer: dlperf {verb} sizes {what}; for inference use dlperf analyze --infer "
            "(time) or dlperf serve (a decoder's KV cache and batch)"
        )


def cmd_memory(args: Namespace) -> None:
    from ..api import memory

    _training_only(args, "memory", "a training step (gradients, optimizer, saved activations)")
    with Spinner(f"tracing {args.model}", quiet=args.json):
        report = memory(None, run_config(args), accumulate=args.accumulate, fit=args.fit)
    show(report, text.memory_report, args.json)


def plan_gpus(args: Namespace) -> list[int]:
    """--gpus (one count or several), or --nodes x --gpus-per-node; refused
    where they disagree."""
    per_node = args.gpus_per_node
    given = args.gpus if isinstance(args.gpus, list) else [args.gpus] if args.gpus else []
    if args.nodes and given and given != [args.nodes * per_node]:
        raise DlperfError(
            f"--nodes {args.nodes} x --gpus-per-node {per_node} is {args.nodes * per_node} "
            f"GPUs, not --gpus {','.join(map(str, given))}: give one of --nodes and --gpus"
        )
    counts = [args.nodes * per_node] if args.nodes else given or [8]
    for gpus in counts:
        if gpus > per_node and gpus % per_node:
            raise DlperfError(
                f"{gpus} GPUs do not fill nodes of {per_node} (--gpus-per-node): give a "
                f"multiple of {per_node}, or the GPUs per node the machines have"
            )
    return counts


def cmd_plan(args: Namespace) -> None:
    from ..api import plan

    _training_only(args, "plan", "the parallel layouts of a training step")
    counts = plan_gpus(args)
    choosing = len(counts) > 1 or any(
        getattr(args, k) is not None
        for k in ("rank", "deadline", "tokens", "steps", "price_per_gpu_hour")
    )
    if args.micro_batch and args.batch and args.micro_batch != args.batch:
        raise DlperfError(
            f"plan traces one micro-batch: give --micro-batch {args.micro_batch} or --batch "
            f"{args.batch}, not both (the global batch is --global-batch)"
        )
    network = args.node_network_gbps * 1e9 / 8 if args.node_network_gbps is not None else None
    measured = read_interconnect(args.interconnect) if args.interconnect else None

    config = run_config(args, node_network_bytes_per_s=network, measured_interconnect=measured)

    def priced(gpus: int):
        return plan(None, RunConfig.build(config, gpus=gpus))

    with Spinner(f"tracing {args.model}", quiet=args.json):
        reports = [priced(gpus) for gpus in counts]
    if not choosing:
        show(reports[0], text.plan_report, args.json, document=_top_plans(args.top), top=args.top)
        return
    chosen = _top_plans(args.top)
    document = lambda d: {**d, "chosen": chosen(d["chosen"])}  # noqa: E731
    show(_run_choices(args, reports), text.run_choices, args.json, document=document, top=args.top)


def _run_choices(args: Namespace, reports) -> dict:
    """The GPU counts' best plans run for --tokens or --steps, ranked (`parallel.budget`)."""
    from ..parallel.budget import parse_deadline, ranked_choices, run_choices

    deadline = parse_deadline(args.deadline) if args.deadline else None
    found = run_choices(reports, args.tokens, args.steps, args.price_per_gpu_hour, deadline)
    if not found:
        raise DlperfError("no plan fits at any of these GPU counts: dlperf plan shows what would")
    ranked = ranked_choices(found, args.rank or "time")
    by_count = {r.gpus: r for r in reports}
    return {
        "rank": args.rank or "time",
        "deadline_s": deadline,
        "choices": [c.to_dict() for c in ranked],
        "chosen": by_count[ranked[0].gpus],
    }


def _prompt_sizes(args: Namespace) -> tuple[int, int]:
    """(batch, input_len) of `dlperf serve`: from --input BxS, else --batch and --input-len."""
    if args.input is None:
        return args.batch or 1, args.input_len or 128
    if args.batch or args.input_len:
        raise DlperfError("give the prompts as --input BxS or as --batch and --input-len, not both")
    from ..models import parse_input

    shape = parse_input(args.input).shape
    if len(shape) != 2:
        raise DlperfError(
            f"--input {args.input!r}: serve takes the prompts' token ids as BATCHxINPUT_LEN, "
            "like 8x128"
        )
    return int(shape[0]), int(shape[1])


# Flags of a static batch, and flags of a simulation, that the other mode has no use for.
STATIC_ONLY = {"batch": "--batch", "input_len": "--input-len", "input": "--input",
               "output_len": "--output-len", "concurrency": "--concurrency",
               "speculative_config": "--speculative-config"}  # fmt: skip
SIMULATION_ONLY = {"max_num_seqs": "--max-num-seqs", "no_chunked_prefill": "--no-chunked-prefill",
                   "no_async_scheduling": "--no-async-scheduling",
                   "prefix_cache_hit_rate": "--prefix-cache-hit-rate",
                   "enforce_eager": "--enforce-eager"}  # fmt: skip


def cmd_serve(args: Namespace) -> None:
    if run_config(args).serving.simulated:
        return _simulate(args)
    given = [flag for key, flag in SIMULATION_ONLY.items() if getattr(args, key)]
    if given:  # a --config's engine settings are kept for a simulation only
        raise DlperfError(
            f"{given[0]} sets the simulated engine; give --request-rate, --num-prompts or "
            "--dataset to simulate a serving benchmark"
        )
    from ..serving import serve

    batch, input_len = _prompt_sizes(args)
    with Spinner(f"tracing {args.model}", quiet=args.json):
        report = serve(None, run_config(args, input_len=input_len, batch=batch))
    show(report, text.serve_report, args.json)


def _simulate(args: Namespace) -> None:
    from ..serving.simulate import simulate

    given = [flag for key, flag in STATIC_ONLY.items() if getattr(args, key)]
    if given:
        raise DlperfError(
            f"{given[0]} is for one static batch; a simulation (--request-rate, --num-prompts, "
            "--dataset) draws its requests from --dataset random:in=I,out=O or a file"
        )
    if args.cuda_graphs and args.enforce_eager:
        raise DlperfError("give --cuda-graphs or --enforce-eager, not both")
    with Spinner(f"simulating {args.model}", quiet=args.json):
        config = run_config(
            args,
            chunked_prefill=not args.no_chunked_prefill,
            async_scheduling=not args.no_async_scheduling,
            cuda_graphs=not args.enforce_eager,  # vLLM replays CUDA graphs unless told not to
        )
        report = simulate(None, config)
    show(report, text.simulation_report, args.json)


def cmd_measure_comm(args: Namespace) -> None:
    from ..measurement.comm import DEFAULT_SIZES, measure_comm

    sizes = byte_sizes(args.sizes) if args.sizes else DEFAULT_SIZES
    if args.out:
        writable_file(args.out)
    result = measure_comm(args.nproc, args.backend, sizes, repeats=args.repeats)
    if args.out:
        write_interconnect(args.out, result["interconnect"])
    show(result, text.comm_report, args.json)


def cmd_advise(args: Namespace) -> None:
    if args.list_rules:
        from ..advice import load_rules

        rules = list(load_rules().values())
        show(rules, text.rules_table, args.json, document=text.rules_document)
        return
    if not args.model:
        raise DlperfError("advise needs a MODEL (or --list-rules)")
    if args.apply:
        _apply(args)
        return
    from ..advice.engine import advise

    with Spinner(f"analysing {args.model}", quiet=args.json):
        result = advise(None, run_config(args), rules=args.rules)
    show(result, text.advice_report, args.json)


def _apply(args: Namespace) -> None:
    """advise --apply: the named automatic fixes applied; the predicted step before and after."""
    from ..advice.engine import apply

    with Spinner(f"analysing {args.model}", quiet=args.json):
        result = apply(None, args.apply, config=run_config(args))
    show(result, text.applied_report, args.json)


def cmd_report(args: Namespace) -> None:
    from ..advice.engine import advise
    from ..api import analyze, memory, report
    from ..run import Session, resolve

    writable_file(args.out)
    data = None
    if args.trace:  # read (or refused) before minutes of analysis
        from ..api import one_trace, read_profile

        data = read_profile(one_trace(args.trace, "report --trace"))
    with Spinner(f"analysing {args.model}", quiet=args.json) as progress:
        # one run, one session: the analysis, the memory, the advice and serving share traces
        run, session = resolve(None, config=run_config(args), verb="analyze"), Session()
        served = _serving(args, run, session)  # first: --serve's error comes at once
        result = analyze(run, progress=progress, session=session)
        mem = memory(run, session=session) if args.train else None
        findings = None if args.no_advice else advise(run, session=session)
        compared = None
        if data is not None:
            from ..measurement.compare import compare_trace

            compared = compare_trace(result, data)
    report(result, args.out, memory=mem, advice=findings, serving=served, comparison=compared)
    show({"out": args.out}, text.written, args.json)


def _serving(args: Namespace, run, session):
    """The report's Serving section with --serve (else None): the sweep, in
    the report's precision when it is a serving one (`serving_precision`)."""
    if not args.serve:
        return None
    from ..serving.sweep import serving_sweep

    return serving_sweep(
        run,
        precision=run.precision.name,
        input_len=args.input_len,
        output_len=args.output_len,
        session=session,
        required=True,  # asked for by --serve: a model it cannot serve is an error
    )


def cmd_sweep(args: Namespace) -> None:
    from ..rendering.sweeps import run_sweep, sweep_names, sweeps_document

    if args.list or not args.name:
        show(sweeps_document(), text.sweeps_list, args.json)
        return
    names = sweep_names(args.name)
    writable_folder(args.out)
    written = [path for name in names for path in run_sweep(name, args.gpu, args.out)]
    show({"written": written}, text.written, args.json)


# How a run is executed on the GPU: measure runs the model here as written.
RUN_WAYS = ("attention", "checkpoint", "compile", "cuda_graphs", "loss", "kernels", "reduce_dtype",
            "sparsity", "clip_grad", "channels_last")  # fmt: skip


def cmd_measure(args: Namespace) -> None:
    from ..api import measure

    changed = [key for key in RUN_WAYS if key in args.given]
    if changed:
        key = changed[0]
        no = "no-" if getattr(args, key) is False and key == "clip_grad" else ""
        flag = f"--{no}{key.replace('_', '-')}"
        raise DlperfError(
            f"measure runs the model here as written (eager, no checkpointing): drop {flag}"
        )
    if args.trace_out:
        writable_file(args.trace_out, "--trace-out")  # before the run
    with Spinner(f"measuring {args.model}", quiet=args.json):
        report = measure(
            None,
            RunConfig.build(**run_options(args, omit=("optimizer", *RUN_WAYS))),
            device=args.device,
            steps=args.steps,
            trace_out=args.trace_out,
        )
    show(report, text.measure_report, args.json)


def cmd_calibrate(args: Namespace) -> None:
    from ..measurement.calibrate import calibrate_device, write_spec

    writable_file(args.out)  # before minutes of probing
    if args.trace:
        return _calibrate_trace(args)
    if args.model:
        raise DlperfError("--model describes the run a trace recorded: give --trace beside it")
    given = device_settings(args)
    if given:
        raise DlperfError(
            f"{next(iter(given))} configures a predicted GPU; calibrate measures this one: drop it"
        )
    with Spinner(f"calibrating the {args.device}", quiet=args.json):
        spec = write_spec(calibrate_device(args.device), args.out)
    show(text.calibration_document(spec, args.out), text.calibration_report, args.json)


def _calibrate_trace(args: Namespace) -> None:
    from ..api import calibrate_trace

    if not args.model:
        raise DlperfError("--trace needs --model: the model the trace ran, with its batch")
    with Spinner(f"fitting {args.trace}", quiet=args.json):
        spec = calibrate_trace(args.trace, None, args.out, config=run_config(args))
    show(text.calibration_document(spec, args.out), text.calibration_report, args.json)


def cmd_compare(args: Namespace) -> None:
    from ..api import compare

    with Spinner(f"comparing {args.model} with {args.trace}", quiet=args.json):
        result = compare(None, args.trace, config=run_config(args))
    show(result, text.compare_report, args.json, document=lambda c: c.to_dict(args.top),
         top=args.top)  # fmt: skip


def cmd_trace(args: Namespace) -> None:
    from ..api import profile_trace

    report = profile_trace(args.path, gpu=args.gpu)
    show(report, text.trace_report, args.json, top=args.top)
