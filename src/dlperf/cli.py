"""The `dlperf` command. Each verb parses its options, calls the public API,
and hands the result to a renderer; `--json` prints one JSON document."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import traceback
from pathlib import Path

from .dtypes import DTYPES
from .errors import DlperfError, InternalError, first_line


class _HelpFormatter(argparse.HelpFormatter):
    """Help that states each option's default, where it has one to state."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            not action.option_strings
            or action.nargs == 0  # flags: their help says what they switch
            or action.default in (None, argparse.SUPPRESS)
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)".lstrip()


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors on one line with exit code 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"dlperf: error: {message} (see `{self.prog} --help`)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < math.inf:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def _writable_file(path: str, flag: str = "--out") -> None:
    """Refuse an output file that cannot be written, before any work is done."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise DlperfError(f"{flag} {path} is a folder; name a file in it")
    if not folder.exists():
        raise DlperfError(f"{flag} {path}: folder {folder} does not exist; create it first")
    if not folder.is_dir():
        raise DlperfError(f"{flag} {path}: {folder} is not a folder")
    existed = target.exists()
    try:
        with open(target, "a"):  # appending nothing changes nothing
            pass
    except OSError as err:
        raise DlperfError(f"cannot write {flag} {path}: {err.strerror or err}") from None
    if not existed:
        target.unlink()  # no empty file left behind if the work fails


def _writable_folder(path: str, flag: str = "--out") -> None:
    """Create an output folder (as the verb would) and prove files can be written in it."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise DlperfError(f"{flag} {path} is a file; name a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise DlperfError(f"cannot write into {flag} {path}: {err.strerror or err}") from None


def _print_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _emit(args, result, render) -> int:
    """One JSON document with --json, else the terminal rendering."""
    if args.json:
        _print_json(result.to_dict())
    else:
        render(result)
    return 0


def cmd_gpus(args) -> int:
    from .hardware import gpus
    from .rendering.terminal import gpus_table

    specs = gpus()
    if args.json:
        _print_json({"gpus": [s.summary() for s in specs]})
    else:
        gpus_table(specs)
    return 0


def cmd_gemm(args) -> int:
    from .gemm import gemm
    from .rendering.terminal import gemm_report

    result = gemm(args.m, args.n, args.k, dtype=args.dtype, gpu=args.gpu, batch=args.batch)
    return _emit(args, result, gemm_report)


# Every verb that takes a model hands MODEL, --input, --batch and --seq-len to
# the API as they are: `api.resolve_model` turns them into a module and inputs.


def cmd_analyze(args) -> int:
    from .api import analyze
    from .rendering.terminal import analysis_report

    with _progress(args, f"tracing {args.model}") as progress:
        result = analyze(
            args.model,
            args.input,
            gpu=args.gpu,
            precision=args.precision,
            training=args.train,
            batch=args.batch,
            seq_len=args.seq_len,
            optimizer=args.optimizer,
            progress=progress,
        )
    if args.json:
        _print_json(result.to_dict())
    else:
        analysis_report(result, top=args.top, depth=args.depth)
    return 0


def cmd_memory(args) -> int:
    from .api import memory
    from .rendering.terminal import memory_report

    with _progress(args, f"tracing {args.model}"):
        report = memory(
            args.model,
            args.input,
            gpu=args.gpu,
            precision=args.precision,
            optimizer=args.optimizer,
            checkpoint=args.checkpoint,
            accumulate=args.accumulate,
            fit=args.fit,
            batch=args.batch,
            seq_len=args.seq_len,
        )
    return _emit(args, report, memory_report)


def _read_interconnect(path: str) -> dict:
    """A measured interconnect file: plain JSON, never code."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as err:
        raise DlperfError(f"cannot read {path}: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise DlperfError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}") from None
    bandwidth = doc.get("bandwidth_bytes_per_s") if isinstance(doc, dict) else None
    if not isinstance(bandwidth, (int, float)) or bandwidth <= 0:
        raise DlperfError(f"{path}: field 'bandwidth_bytes_per_s' must be a positive number")
    return doc


def cmd_plan(args) -> int:
    from .api import plan
    from .rendering.terminal import plan_report

    network = args.node_network_gbps * 1e9 / 8 if args.node_network_gbps is not None else None
    measured = _read_interconnect(args.interconnect) if args.interconnect else None
    with _progress(args, f"tracing {args.model}"):
        report = plan(
            args.model,
            args.input,
            gpu=args.gpu,
            gpus=args.gpus,
            gpus_per_node=args.gpus_per_node,
            global_batch=args.global_batch,
            micro_batch=args.micro_batch or args.batch,  # plan traces one micro-batch
            precision=args.precision,
            optimizer=args.optimizer,
            node_network_bytes_per_s=network,
            seq_len=args.seq_len,
            measured_interconnect=measured,
        )
    if args.json:
        _print_json(report.to_dict())
    else:
        plan_report(report, top=args.top)
    return 0


def cmd_measure_comm(args) -> int:
    from .measurement.comm import DEFAULT_SIZES, measure_comm
    from .rendering.terminal import comm_report

    sizes = DEFAULT_SIZES
    if args.sizes:
        try:
            sizes = [int(float(s)) for s in args.sizes.split(",")]
        except ValueError:
            raise DlperfError(
                f"--sizes {args.sizes!r} is not a comma-separated list of byte counts"
            ) from None
        if any(s <= 0 for s in sizes):
            raise DlperfError("--sizes must be positive byte counts")
    if args.out:
        _writable_file(args.out)
    result = measure_comm(args.nproc, args.backend, sizes, repeats=args.repeats)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result["interconnect"], f, indent=2)
    if args.json:
        _print_json(result)
    else:
        comm_report(result)
    return 0


def cmd_advise(args) -> int:
    from .advice import load_rules
    from .rendering.terminal import advice_report, rules_table

    if args.list_rules:
        rules = load_rules()
        if args.json:
            _print_json(
                {
                    "rules": [
                        {
                            "rule": r.id,
                            "title": r.title,
                            "source": r.source,
                            "automatic_fix": bool(r.fix),
                        }
                        for r in rules.values()
                    ]
                }
            )
        else:
            rules_table(rules.values())
        return 0
    if not args.model:
        raise DlperfError("advise needs a MODEL (or --list-rules)")
    from .advice.engine import advise

    if args.apply:
        _check_fixable(args.apply)
    with _progress(args, f"analysing {args.model}"):
        if args.apply:
            from .advice.engine import _context, apply_fixes, run_rules

            ctx = _context(
                args.model,
                args.input,
                args.gpu,
                args.precision,
                args.train,
                args.optimizer,
                args.batch,
                args.seq_len,
            )
            findings = run_rules(ctx, args.apply)
            fixed, fixed_inputs, fixed_precision = apply_fixes(ctx, findings)
            after = ctx.reanalyze(fixed, fixed_inputs, fixed_precision).time_s
            doc = {
                "applied": sorted({f.rule for f in findings}),
                "predicted_time_s": ctx.step_time_s,
                "predicted_time_after_s": after,
            }
            if args.json:
                _print_json(doc)
            else:
                sys.stdout.write(
                    f"applied {', '.join(doc['applied']) or 'nothing (no finding)'}: "
                    f"predicted step {ctx.step_time_s * 1e3:.3g} ms -> {after * 1e3:.3g} ms "
                    f"({ctx.step_time_s / after:.2f}x)\n"
                )
            return 0
        result = advise(
            args.model,
            args.input,
            gpu=args.gpu,
            precision=args.precision,
            training=args.train,
            optimizer=args.optimizer,
            batch=args.batch,
            seq_len=args.seq_len,
            rules=args.rules,
        )
    return _emit(args, result, advice_report)


def _check_fixable(rules: str) -> None:
    """--apply names only rules with an automatic fix (before any tracing)."""
    from .advice import load_rules
    from .advice.engine import _check_rules

    known = load_rules()
    manual = [r for r in _check_rules(rules) if not known[r].fix]
    if manual:
        fixable = ", ".join(r.id for r in known.values() if r.fix)
        raise DlperfError(
            f"rule {manual[0]} has no automatic fix (its finding says what to change); "
            f"--apply takes: {fixable}"
        )


def cmd_trace(args) -> int:
    from .measurement.trace_report import analyze_profile
    from .rendering.terminal import trace_report

    report = analyze_profile(args.path, gpu=args.gpu)
    if args.json:
        _print_json(report.to_dict())
    else:
        trace_report(report, top=args.top)
    return 0


def cmd_measure(args) -> int:
    from .api import measure
    from .rendering.terminal import measure_report

    with _progress(args, f"measuring {args.model}"):
        report = measure(
            args.model,
            args.input,
            device=args.device,
            precision=args.precision,
            training=args.train,
            batch=args.batch,
            seq_len=args.seq_len,
            steps=args.steps,
            gpu=args.gpu,
        )
    return _emit(args, report, measure_report)


def cmd_calibrate(args) -> int:
    from .measurement.calibrate import calibrate_device, write_spec

    _writable_file(args.out)  # before minutes of probing
    with _progress(args, f"calibrating the {args.device}"):
        spec = write_spec(calibrate_device(args.device), args.out)
    doc = {
        "out": args.out,
        "spec": spec.summary(),
        "efficiency": {
            k: getattr(spec.efficiency, k) for k in ("kernel_latency_s", "saturation_bytes_per_sm")
        },
    }
    if args.json:
        _print_json(doc)
    else:
        sys.stdout.write(f"wrote {args.out}: {spec.name}; use it as --gpu {args.out}\n")
    return 0


def cmd_report(args) -> int:
    from .advice.engine import advise
    from .api import report
    from .run import Session, resolve
    from .training_memory import memory_report

    _writable_file(args.out)
    with _progress(args, f"analysing {args.model}") as progress:
        # one run, one session: the analysis, the memory and the advice share one trace
        run = resolve(
            args.model,
            args.input,
            gpu=args.gpu,
            precision=args.precision,
            training=args.train,
            optimizer=args.optimizer,
            batch=args.batch,
            seq_len=args.seq_len,
        )
        session = Session()
        result = session.analysis(run, progress)
        mem = memory_report(run, session) if args.train else None
        findings = None if args.no_advice else advise(run, session=session)
    report(result, args.out, memory=mem, advice=findings)
    if args.json:
        _print_json({"out": args.out})
    else:
        sys.stdout.write(f"wrote {args.out}\n")
    return 0


def cmd_sweep(args) -> int:
    from .rendering.sweeps import SWEEPS, run_sweep

    if args.list or not args.name:
        doc = {
            "sweeps": [{"name": n, "title": t, "default_gpu": g} for n, (_, t, g) in SWEEPS.items()]
        }
        if args.json:
            _print_json(doc)
        else:
            for s in doc["sweeps"]:
                sys.stdout.write(
                    f"{s['name']:18s} {s['title']} (default --gpu {s['default_gpu']})\n"
                )
        return 0
    if args.name != "all" and args.name not in SWEEPS:
        raise DlperfError(f"unknown sweep {args.name!r}; see `dlperf sweep --list`")
    _writable_folder(args.out)
    names = list(SWEEPS) if args.name == "all" else [args.name]
    written = [path for name in names for path in run_sweep(name, args.gpu, args.out)]
    if args.json:
        _print_json({"written": written})
    else:
        sys.stdout.write("wrote " + ", ".join(written) + "\n")
    return 0


class _progress:
    """A spinner with an op count on stderr while tracing (silent with --json or no tty)."""

    def __init__(self, args, label: str):
        self.label = label
        self.status = None
        self.enabled = not args.json and sys.stderr.isatty()

    def __enter__(self):
        if self.enabled:
            from rich.console import Console

            self.status = Console(stderr=True).status(f"{self.label} ...")
            self.status.start()
        return self.update

    def update(self, count: int) -> None:
        if self.status:
            self.status.update(f"{self.label}: {count:,} ops recorded")

    def __exit__(self, *exc):
        if self.status:
            self.status.stop()
        return False


def _add_model_options(p) -> None:
    from .precision import AUTO, POLICIES

    p.add_argument(
        "model",
        metavar="MODEL",
        help="torchvision:NAME, hf:NAME, timm:NAME or path/to/file.py:factory "
        "(a file runs your code)",
    )
    p.add_argument("--gpu", default="a100", help="catalogue id, alias, spec file, or 'cpu'")
    p.add_argument(
        "--precision",
        default=AUTO,
        choices=[*POLICIES, AUTO],
        help="auto: amp-bf16 where the GPU has bf16 math, else amp-fp16, else fp32",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--train",
        dest="train",
        action="store_true",
        default=True,
        help="forward, backward and optimizer step (default)",
    )
    mode.add_argument("--infer", dest="train", action="store_false", help="forward only")
    p.add_argument(
        "--input",
        action="append",
        metavar="SHAPE",
        help="input shape like 8x3x224x224 or 4x128:int64 (repeatable)",
    )
    p.add_argument(
        "--batch",
        type=_positive_int,
        help="batch size of the default inputs (default: 32 images or 8 sequences; "
        "a model file's own)",
    )
    p.add_argument(
        "--seq-len",
        type=_positive_int,
        help="sequence length of the default inputs (default: 512, or the model's "
        "positions if fewer)",
    )
    p.add_argument(
        "--optimizer",
        default="adamw",
        choices=["adamw", "adam", "sgd", "sgd-momentum", "adam8bit", "adafactor"],
        help="optimizer the step is costed with",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dlperf",
        description="Why is my model slow on this GPU, what will it cost in memory, and what "
        "should I change? Predictions from shapes alone: no GPU, no weights.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"dlperf {__version__}")
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    p = sub.add_parser("gpus", help="list the bundled GPU catalogue")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_gpus)

    p = sub.add_parser("gemm", help="predict one GEMM: C[M,N] = A[M,K] B[K,N]")
    p.add_argument("m", type=_positive_int, metavar="M")
    p.add_argument("n", type=_positive_int, metavar="N")
    p.add_argument("k", type=_positive_int, metavar="K")
    p.add_argument("--gpu", default="a100", help="catalogue id, alias, spec file, or 'cpu'")
    p.add_argument("--dtype", default="fp16", choices=DTYPES)
    p.add_argument("--batch", type=_positive_int, default=1, help="batched GEMM count")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_gemm)

    p = sub.add_parser("analyze", help="predict every op of a model's training or inference step")
    _add_model_options(p)
    p.add_argument("--top", type=_positive_int, default=15, help="ops to list")
    p.add_argument("--depth", type=_positive_int, default=2, help="module tree depth")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("memory", help="memory of one training step per GPU, and what fits")
    _add_model_options(p)
    p.add_argument(
        "--checkpoint",
        default="none",
        help="gradient checkpointing of the repeated blocks: none, blocks, every:K, sqrt",
    )
    p.add_argument(
        "--accumulate",
        type=_positive_int,
        default=1,
        help="gradient accumulation: micro-batches per step",
    )
    p.add_argument(
        "--fit",
        action="store_true",
        help="also find the largest batch (and sequence length) that fits",
    )
    p.set_defaults(func=cmd_memory)

    p = sub.add_parser("plan", help="rank data/tensor/pipeline/ZeRO plans on many GPUs")
    _add_model_options(p)
    p.add_argument("--gpus", type=_positive_int, default=8, help="GPUs in all")
    p.add_argument("--gpus-per-node", type=_positive_int, default=8, help="GPUs per node")
    p.add_argument("--nodes", type=_positive_int, help="nodes (sets --gpus with --gpus-per-node)")
    p.add_argument(
        "--global-batch",
        type=_positive_int,
        help="samples per optimizer step (default: 4 x GPUs x micro-batch)",
    )
    p.add_argument(
        "--micro-batch",
        type=_positive_int,
        help="samples per forward pass (default: --batch, else the --input batch, else 1)",
    )
    p.add_argument(
        "--node-network-gbps",
        type=_positive_float,
        help="inter-node bandwidth per node in Gb/s (default: 8 x 200)",
    )
    p.add_argument("--top", type=_positive_int, default=12, help="plans to list")
    p.add_argument(
        "--interconnect",
        metavar="FILE",
        help="measured interconnect (JSON from `dlperf measure-comm --out`)",
    )
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("advise", help="the guides' rules, tied to layers, with predicted gains")
    _add_model_options(p)
    p.set_defaults(func=cmd_advise)
    p.add_argument("--list-rules", action="store_true", help="list the rules and their sources")
    p.add_argument("--rules", help="comma-separated rule ids to run (default: all)")
    p.add_argument(
        "--apply",
        metavar="RULE[,RULE]",
        help="apply these automatic fixes and print the predicted before/after",
    )
    for action in p._actions:  # MODEL is optional with --list-rules
        if action.dest == "model":
            action.nargs = "?"

    p = sub.add_parser("report", help="write a self-contained HTML report")
    _add_model_options(p)
    p.add_argument("--out", required=True, help="HTML file to write")
    p.add_argument("--no-advice", action="store_true", help="leave out the findings")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("sweep", help="predicted curves that redraw the guides' figures")
    p.add_argument("name", nargs="?", help="a sweep name, or 'all' (see --list)")
    p.add_argument("--list", action="store_true", help="list the sweeps")
    p.add_argument("--gpu", help="catalogue id (default: the GPU of the guide's figure)")
    p.add_argument("--out", default="sweeps", help="folder for NAME.csv and NAME.svg")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("measure", help="run the model here and compare with the prediction")
    _add_model_options(p)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where it runs")
    p.add_argument("--steps", type=_positive_int, default=3, help="profiled steps")
    p.set_defaults(func=cmd_measure, precision="fp32", gpu=None)  # it runs on --device

    p = sub.add_parser("calibrate", help="measure this device and write a spec file")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="what to probe")
    p.add_argument("--out", required=True, help="spec file to write (TOML)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("trace", help="read a PyTorch profiler trace of a GPU run")
    p.add_argument("path", help="Chrome trace JSON written by torch.profiler (.json or .json.gz)")
    p.add_argument("--gpu", help="the GPU it ran on (default: read from the trace)")
    p.add_argument("--top", type=_positive_int, default=15, help="rows to list")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("measure-comm", help="time real collectives with torch.distributed")
    p.add_argument("--nproc", type=_positive_int, default=2, help="worker processes")
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"], help="collectives")
    p.add_argument("--sizes", help="comma-separated buffer sizes in bytes")
    p.add_argument("--repeats", type=_positive_int, default=5, help="timed calls per size")
    p.add_argument("--out", help="write the fitted interconnect (JSON) for `dlperf plan`")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_measure_comm)
    for verb in sub.choices.values():  # --debug after the verb too; SUPPRESS keeps the top one
        verb.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP
        )
    return parser


_DEBUG_HELP = "show the traceback when dlperf fails"


def main(argv=None) -> int:
    """Run one verb: 0 on success, 2 for bad input, 3 for a bug of dlperf's own."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "nodes", None):
        args.gpus = args.nodes * args.gpus_per_node
    try:
        return args.func(args)
    except DlperfError as err:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"dlperf: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("dlperf: interrupted\n")
        return 130
    except Exception as err:  # anything else is dlperf's own failure, never the user's
        if args.debug:
            traceback.print_exc()
        bug = err if isinstance(err, InternalError) else InternalError.of(err)
        line = first_line(bug, limit=1000)
        hint = "" if args.debug else "; rerun with --debug for the traceback"
        sys.stderr.write(f"dlperf: {line}{hint}\n")
        return 3
