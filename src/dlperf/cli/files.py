"""The files the command line reads and writes besides the model: output
paths proven writable before any work is done, and the measured
interconnect that `measure-comm --out` writes and `plan --interconnect` reads."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..errors import DlperfError


def writable_file(path: str, flag: str = "--out") -> None:
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


def writable_folder(path: str, flag: str = "--out") -> None:
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


def read_interconnect(path: str) -> dict:
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


def write_interconnect(path: str, interconnect: dict) -> None:
    with open(path, "w") as f:
        json.dump(interconnect, f, indent=2)
