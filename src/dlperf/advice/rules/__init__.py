"""The rules, one module per family. Importing this package registers them
in the order of the guides' checklists, the order `dlperf advise
--list-rules` shows and the order findings of equal gain keep."""

from __future__ import annotations

from importlib import import_module

FAMILIES = (
    "precision",  # Tensor Core math: fp32 -> TF32 or AMP
    "alignment",  # Linear sizes and the vocabulary padded for Tensor Cores
    "layout",  # NHWC convolutions, the first convolution's channels
    "convolution",  # a convolution's bias before batch norm
    "transformer",  # fused Q, K, V projections; fused attention
    "quantization",  # tile and wave quantization of GEMMs
    "bounds",  # memory-bound share, latency-bound kernels, small batches
    "recurrent",  # recurrent layer sizes
    "memory",  # the step fits in GPU memory
    "settings",  # loss scaling, bf16, cuDNN autotuning
    "hierarchical",  # early layers, activations that fuse
    "sparsity",  # 2:4 structured sparsity (advice only: it changes outputs)
)

for _family in FAMILIES:
    import_module(f"{__name__}.{_family}")
