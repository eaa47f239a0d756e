"""A made-up CPU spec document, as the probe would cache it, for tests that
must not wait for a real probe. Only the figures a test reads are arguments."""


def fake_cpu_doc(
    bandwidth_bytes_per_s: float,
    memory_bytes: int = 2**34,
    kernel_latency_s: float = 1e-6,
    **efficiency,
) -> dict:
    return {
        "id": "cpu",
        "name": "test cpu",
        "kind": "cpu",
        "architecture": "cpu",
        "sm_count": 2,
        "boost_clock_mhz": 1000.0,
        "memory_bytes": memory_bytes,
        "memory_bandwidth_bytes_per_s": bandwidth_bytes_per_s,
        "l2_cache_bytes": 2**20,  # 1 MiB
        "sources": ["test"],
        # 1e11 FLOP/s: 2 cores x 1 GHz x 25 multiply-adds x 2
        "math": {
            "fp32": {"peak_flops_per_s": 1e11, "macs_per_clock_per_sm": 25.0, "tensor_cores": False}
        },
        "efficiency": {"kernel_latency_s": kernel_latency_s, **efficiency},
    }
