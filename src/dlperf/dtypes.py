"""Data types by the short names used everywhere in dlperf.

`fp32` means true single precision on CUDA cores; `tf32` means fp32 storage
with Tensor Core math in TF32. Sizes are the bytes one element occupies in
memory (TF32 is stored as fp32).
"""

from .errors import DlperfError

BYTES_PER_ELEMENT = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "int8": 1,
}

DTYPES = tuple(BYTES_PER_ELEMENT)


def check_dtype(dtype: str) -> str:
    name = str(dtype).lower()
    if name not in BYTES_PER_ELEMENT:
        raise DlperfError(f"unknown dtype {dtype!r}; choose from: {', '.join(DTYPES)}")
    return name


def bytes_per_element(dtype: str) -> int:
    return BYTES_PER_ELEMENT[check_dtype(dtype)]


def accumulator_bytes(dtype: str) -> int:
    """Bytes per element of a GEMM's output when it keeps the input dtype.

    Integer GEMMs usually write int32; the rest write their own dtype.
    """
    return 4 if check_dtype(dtype) == "int8" else bytes_per_element(dtype)
