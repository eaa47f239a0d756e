"""Find a model's repeated blocks (transformer layers, ResNet bottlenecks)."""

from __future__ import annotations

from collections import Counter

from torch import nn


def repeated_blocks(model: nn.Module) -> list[str]:
    """Paths of the model's repeated blocks: children of a container (ModuleList
    or Sequential) that share one type, have submodules of their own, and
    number two or more (transformer layers, ResNet bottlenecks). In order."""
    found = []
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        kinds = Counter(type(c).__name__ for _, c in children)
        for name, child in children:
            if kinds[type(child).__name__] >= 2 and any(True for _ in child.children()):
                child_path = f"{path}.{name}" if path else name
                if not any(child_path.startswith(p + ".") for p in found):
                    found.append(child_path)
    return found
