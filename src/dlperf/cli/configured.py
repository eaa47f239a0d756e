"""`--config FILE` on the command line: the options a framework's config
sets, filled where the command line left them at their defaults."""

from __future__ import annotations

import argparse

from ..errors import DlperfError
from ..run_config import APPLIES, KEYWORDS
from .handlers import RUN_WAYS, SIMULATION_ONLY, plan_gpus
from .options import run_config

# What a training config sets that an inference pass has no use for (and refuses
# when given on the command line): recompute, the loss kernel, clipping.
TRAINING_ONLY = ("checkpoint", "loss", "clip_grad")


def _launched(args: argparse.Namespace, job, path: str):
    """The GPUs the config's launcher starts (torchrun's --nproc_per_node x
    --nnodes) as plan's --gpus and --gpus-per-node, where the command line gives
    neither them nor --nodes."""
    if job.gpus and not {"gpus", "nodes", "gpus_per_node"} & set(args.given):
        args.gpus, args.gpus_per_node = job.gpus, job.gpus_per_node or args.gpus_per_node
    return job


def apply_config(args: argparse.Namespace) -> None:
    """Fill the options `--config FILE` sets that the command line does not
    give (a flag given wins, whatever its value); then make sure a model is
    named. Serving's scheduler settings (vLLM's --max-num-seqs ...) apply
    when it simulates."""
    path = getattr(args, "config", None)
    if path:
        from ..configs import read_config

        gpus = None  # resolves the config's "the GPUs left" degrees: plan's one count
        if args.verb == "plan":
            job = _launched(args, read_config(path), path)
            counts = plan_gpus(args)  # several: each plan searches what the config leaves
            gpus = counts[0] if len(counts) == 1 else None
        job = read_config(path, gpus=gpus)
        if args.verb == "plan" and job.format == "vllm":
            raise DlperfError(
                f"{path} is a serving config ({job.format}): dlperf serve --config prices it; "
                "plan lays out a training step"
            )
        values = job.cli_values(args.verb)
        if args.verb == "measure":  # it runs the model as written: no run options
            values = {k: v for k, v in values.items() if k not in RUN_WAYS}
        elif getattr(args, "train", True) is False:  # --infer: the config's training only
            values = {k: v for k, v in values.items() if k not in TRAINING_ONLY}
        if args.verb in APPLIES:  # a file's options for other verbs (a plan's reduce dtype)
            applies = APPLIES[args.verb]
            values = {k: v for k, v in values.items() if k not in KEYWORDS or k in applies}
        if args.verb == "serve" and not run_config(args).serving.simulated:
            values = {k: v for k, v in values.items() if k not in SIMULATION_ONLY}
        for dest, value in values.items():
            if hasattr(args, dest) and dest not in args.given:
                setattr(args, dest, value)
    # calibrate needs a model only beside --trace, and says so itself
    optional = getattr(args, "list_rules", False) or args.verb == "calibrate"
    if hasattr(args, "model") and args.model is None and not optional:
        if path:
            raise DlperfError(
                f"{path} names no model (a {job.format} config): give MODEL beside --config, "
                "such as hf:ORG/NAME"
            )
        raise DlperfError(
            "name a MODEL (hf:NAME, hf:ORG/NAME, torchvision:NAME, file.py:factory), or give "
            "--config FILE with one"
        )
