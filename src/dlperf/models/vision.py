"""Image models by name: `torchvision:NAME` and `timm:NAME`."""

from __future__ import annotations

import functools

import torch

from ..errors import DlperfError
from .building import build_without_weights, near
from .inputs import DEFAULT_IMAGE
from .loaded import LoadedModel

# Models trained at another resolution than DEFAULT_IMAGE.
_IMAGE_SIZES = {"inception_v3": 299}


def torchvision_model(name: str, batch: int, image: int | None) -> LoadedModel:
    try:
        import torchvision
    except ImportError:
        raise DlperfError("torchvision is not installed: pip install torchvision") from None
    names = torchvision.models.list_models()
    if name not in names:
        raise DlperfError(f"unknown torchvision model {name!r}; {near(name, names)}")
    kwargs = (
        {"aux_logits": False, "init_weights": False}
        if name in ("inception_v3", "googlenet")
        else {}
    )
    model = build_without_weights(torchvision.models.get_model, name, weights=None, **kwargs)
    size = image or _IMAGE_SIZES.get(name, DEFAULT_IMAGE)
    x = torch.empty(batch, 3, size, size, device="meta")
    real = functools.partial(torchvision.models.get_model, name, weights=None, **kwargs)
    return LoadedModel(f"torchvision:{name}", model, x, "vision", build_real=real)


def timm_model(name: str, batch: int, image: int | None) -> LoadedModel:
    try:
        import timm
    except ImportError:
        raise DlperfError("timm is not installed: pip install timm") from None
    names = timm.list_models()
    if name not in names:
        raise DlperfError(f"unknown timm model {name!r}; {near(name, names)}")
    model = build_without_weights(timm.create_model, name, pretrained=False)
    size = image or model.default_cfg.get("input_size", (3, DEFAULT_IMAGE, DEFAULT_IMAGE))[-1]
    x = torch.empty(batch, 3, size, size, device="meta")
    real = functools.partial(timm.create_model, name, pretrained=False)
    return LoadedModel(f"timm:{name}", model, x, "vision", build_real=real)
