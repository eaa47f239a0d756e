"""A model's Hugging Face `config.json`: the file names the model (built
as `hf:PATH`) and nothing about the run."""

from __future__ import annotations

from .job import Job


def looks_like(doc: dict) -> bool:
    return "model_type" in doc


def read(doc: dict, path: str, gpus: int | None = None) -> Job:
    """`gpus` is taken so that every format reads alike; a model's config
    says nothing the GPU count would resolve."""
    job = Job("hf-config", path, model=f"hf:{path}")
    job.use("model_type", doc.get("model_type"), f"the model: hf:{path}")
    for key, value in doc.items():
        if key != "model_type":
            job.use(key, value, "a field of the model's config")
    return job
