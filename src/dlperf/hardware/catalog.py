"""The bundled device catalogue: lookup by id, alias, device string or file."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from ..errors import DlperfError, close_matches
from .cpu import cpu_spec
from .spec import (
    CPU_CUDA_CONTEXT,
    CPU_POWER_LIMIT,
    SPECS_DIR,
    HardwareSpec,
    _architecture_defaults,
    check_settings,
    load_spec_file,
    spec_from_dict,
)

CPU_NAMES = ("cpu", "local")


def _normalize(name: str) -> str:
    """'Tesla V100-SXM2-16GB' and 'NVIDIA Tesla V100 SXM2 16GB' -> 'v100-sxm2-16gb'."""
    name = name.strip().lower()
    name = re.sub(r"^(nvidia\s+)?(geforce\s+)?(tesla\s+)?", "", name)
    return re.sub(r"[\s_]+", "-", name)


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, HardwareSpec]:
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    defaults = _architecture_defaults()
    specs = {}
    for path in sorted(SPECS_DIR.glob("*.toml")):
        if path.name.startswith("_"):
            continue
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        spec = spec_from_dict(raw, where=f"bundled spec {path.name}", arch_defaults=defaults)
        specs[spec.id] = spec
    return specs


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    index = {}
    for spec in _catalog().values():
        for key in (spec.id, *spec.aliases, spec.name, *spec.device_names):
            index.setdefault(key.lower(), spec.id)
            index.setdefault(_normalize(key), spec.id)
    return index


def gpus() -> list[HardwareSpec]:
    """Every bundled device, in id order."""
    return [_catalog()[k] for k in sorted(_catalog())]


def resolve_id(name: str) -> str | None:
    index = _index()
    return index.get(name.lower()) or index.get(_normalize(name))


def gpu(
    name_or_path,
    *,
    power_limit: float | None = None,
    torch_version: str | None = None,
    cuda_context_mib: float | None = None,
) -> HardwareSpec:
    """A device by catalogue id, alias, device string, spec file path, or 'cpu'.

    `power_limit` caps the card below its TDP (watts, as `nvidia-smi -pl`);
    `torch_version` ("2.5") names the PyTorch whose kernels run (SDPA's
    dispatcher order); `cuda_context_mib` is the CUDA context as the user's
    driver and PyTorch build take it (MiB, as nvidia-smi shows after the first
    CUDA call). Each overrides what a spec file sets.
    """
    settings = (power_limit, torch_version, cuda_context_mib)
    if str(name_or_path).lower() in CPU_NAMES:  # refused before the probe runs
        if power_limit is not None:
            raise DlperfError(CPU_POWER_LIMIT)
        if cuda_context_mib is not None:
            raise DlperfError(CPU_CUDA_CONTEXT)
    spec = _lookup(name_or_path)
    if all(s is None for s in settings):
        return spec
    changes = {}
    if power_limit is not None:
        changes["power_limit_watts"] = float(power_limit)
    if torch_version is not None:
        changes["torch_version"] = str(torch_version)
    if cuda_context_mib is not None:
        changes["cuda_context_bytes"] = round(float(cuda_context_mib) * 2**20)
    spec = dataclasses.replace(spec, **changes)
    check_settings(spec, "")
    return spec


def _lookup(name_or_path) -> HardwareSpec:
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    name = str(name_or_path)
    if name.lower() in CPU_NAMES:
        return cpu_spec()
    looks_like_file = name.lower().endswith((".toml", ".json")) or "/" in name
    if looks_like_file or Path(name).is_file():
        return load_spec_file(name)
    found = resolve_id(name)
    if found:
        return _catalog()[found]
    choices = list(_catalog()) + [a for s in _catalog().values() for a in s.aliases]
    raise DlperfError(
        f"unknown GPU {name!r}; {close_matches(name.lower(), choices)} "
        "(see `dlperf gpus`, or pass a spec file path)"
    )
