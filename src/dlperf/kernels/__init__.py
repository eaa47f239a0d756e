"""The kernel model: what turns a cost (FLOPs, bytes, GEMM shapes) into time on a device.

One module per kernel family, so that a new GPU generation is a TOML file
(`hardware/specs/`) and a new kernel family is one module here:

- `roofline`: ridge point, the one limiter rule, the memory-bound (streaming)
  kernels with the small-tensor plateau and L2-resident against DRAM traffic;
- `gemm_tiles`: GEMMs as thread-block tiles in waves over the SMs, split-K,
  Tensor Core alignment (N and K; never M), the architecture's ceiling;
- `quantized`: weight-only int8/int4 GEMMs (group scales, dequantization);
- `attention`: which fused attention kernel runs (the installed PyTorch's
  dispatcher, FlashAttention-2/-3, cuDNN, Triton) and its efficiency curve;
- `fixed_costs`: a kernel's fixed device time, and the gap between kernels
  back to back in a stream and under CUDA graphs;
- `clocks`: the clock a card sustains under its power limit;
- `host`: the host issuing kernels (dispatch, launches, CUDA graphs);
- `losses`: the tile, wave, alignment, layout and latency losses as records;
- `pricing`: `time(cost, spec)`, the one place a cost meets the hardware;
- `gemm`: `dlperf gemm`, one GEMM through `pricing.time`.
"""
