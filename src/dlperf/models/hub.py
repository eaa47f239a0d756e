"""Models by their hub id without network: bundled `config.json` files of
widely used checkpoints (`hub/`, each with its source), and a local
`config.json` or checkpoint folder (`hf:path/to/config.json`).

Reading a config reads JSON only; no code from the checkpoint runs.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from ..errors import DlperfError

HUB_DIR = Path(__file__).with_name("hub")


def hub_ids() -> list[str]:
    """The bundled checkpoints, as ORG/NAME."""
    return sorted(p.stem.replace("--", "/", 1) for p in HUB_DIR.glob("*.json"))


def bundled(hub_id: str) -> dict:
    """The bundled config of `hub_id` (with its `_source`), or a one-line refusal."""
    file = HUB_DIR / (hub_id.replace("/", "--", 1) + ".json")
    if not file.is_file():
        near = difflib.get_close_matches(hub_id, hub_ids(), n=3, cutoff=0.4)
        hint = f"nearest: {', '.join(near)}; " if near else ""
        raise DlperfError(
            f"no bundled config for {hub_id!r} ({hint}`dlperf models` lists them); pass the "
            "checkpoint's config.json as hf:path/to/config.json"
        )
    return json.loads(file.read_text())


def config_fields(name: str) -> dict | None:
    """The config fields `name` stands for: a local config.json or checkpoint
    folder, or a bundled hub id (ORG/NAME); None for any other name."""
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json":
        if not path.is_file():
            raise DlperfError(f"no config file {str(path)!r}")
        try:
            doc = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DlperfError(f"{path}: malformed JSON ({err})") from None
    elif "/" in name:
        doc = bundled(name)
    else:
        return None
    if not isinstance(doc, dict) or "model_type" not in doc:
        raise DlperfError(f"{path}: a model's config.json names its model_type")
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def models_document() -> list[dict]:
    """`dlperf models`: each bundled checkpoint with its type and source."""
    out = []
    for hub_id in hub_ids():
        doc = bundled(hub_id)
        out.append(
            {
                "id": f"hf:{hub_id}",
                "model_type": doc.get("model_type"),
                "layers": doc.get("num_hidden_layers", doc.get("n_layer", doc.get("num_layers"))),
                "hidden": doc.get("hidden_size", doc.get("n_embd", doc.get("d_model"))),
                "source": doc.get("_source", ""),
            }
        )
    return out
