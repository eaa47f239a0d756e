"""The attention kernels' registry is the one list: adding a backend is one entry
(and its efficiencies in the architecture table), and every other list of
names derives from it."""

from __future__ import annotations

import pytest

from dlperf.errors import DlperfError
from dlperf.hardware.catalog import gpus
from dlperf.hardware.spec import Efficiency, spec_from_dict
from dlperf.kernels import attention
from dlperf.kernels.attention import compute_capability
from dlperf.kernels.attention_backends import (
    ALIASES,
    ATTENTION_CHOICES,
    BY_NAME,
    FUSED,
    REGISTRY,
)
from dlperf.ops.cost import AttentionShape


def test_the_choices_are_the_user_facing_names_in_order():
    assert ATTENTION_CHOICES == (
        "auto", "flash", "flash2", "flash3", "flash1", "cudnn", "efficient", "triton", "math",
        "eager",
    )  # fmt: skip
    assert ALIASES == {"flash2": "flash"}
    assert attention.ATTENTION_CHOICES is ATTENTION_CHOICES
    assert attention.ALIASES is ALIASES


def test_the_run_configuration_takes_the_registry_choices():
    import dlperf.run_config

    assert dlperf.run_config.ATTENTION == ATTENTION_CHOICES


def test_every_choice_is_a_backend_an_alias_auto_or_eager():
    names = [b.name for b in REGISTRY]
    assert len(set(names)) == len(names)
    assert not set(ALIASES) & set(names)
    for choice in ATTENTION_CHOICES:
        assert choice in BY_NAME or ALIASES.get(choice) in BY_NAME or choice in ("auto", "eager")


def test_the_other_lists_are_the_registry_s():
    from dlperf.models.huggingface import SDPA_BACKENDS
    from dlperf.ops.attention import _NAMED
    from dlperf.tracing.attention import FUSED_REQUESTS

    assert ("auto", *FUSED) == FUSED_REQUESTS
    assert set(SDPA_BACKENDS) == set(BY_NAME)
    assert set(_NAMED) == {b.name for b in REGISTRY if b.aten}
    assert tuple(BY_NAME) == attention.BACKENDS
    assert set(attention.KERNEL_NAMES) == set(BY_NAME)
    assert tuple(b.name for b in REGISTRY if b.name != "math") == FUSED


def test_every_fused_backend_has_efficiencies_and_only_those():
    """The architecture table prices exactly the registered fused kernels."""
    assert set(Efficiency.defaults().attention) == set(FUSED)
    for spec in gpus():
        assert set(spec.efficiency.attention) == set(FUSED), spec.id


def _shape(dtype: str, phase: str, head_dim: int = 64) -> AttentionShape:
    return AttentionShape(
        batch=8, heads=16, kv_heads=16, q_len=2048, kv_len=2048, head_dim=head_dim,
        value_dim=head_dim, causal=True, dtype=dtype, math_dtype=dtype, mask="", dropout=0.0,
        phase=phase, requested="auto", needs_grad=phase == "forward",
    )  # fmt: skip


@pytest.mark.parametrize("backend", FUSED)
def test_a_backend_is_priced_on_every_gpu_it_runs_on(backend):
    """Where a kernel's own rules let it run a plain call, its family's table
    prices it (an anchor of 0 would refuse it instead)."""
    kernel = BY_NAME[backend]
    ran_somewhere = False
    for spec in gpus():
        if spec.kind != "gpu":
            continue
        cc = compute_capability(spec)
        for dtype in ("fp16", "bf16"):
            for phase in ("forward", "backward"):
                if kernel.why_not(cc, _shape(dtype, phase)):
                    continue
                ran_somewhere = True
                assert kernel.anchor(spec.efficiency, phase) > 0, (spec.id, dtype, phase)
    assert ran_somewhere


def test_a_spec_file_s_flat_attention_keys_still_apply():
    from dlperf.hardware.catalog import gpu

    h100 = gpu("h100")
    raw = {k: v for k, v in h100.to_dict().items() if k not in ("efficiency", "calibration")}
    raw["efficiency"] = {"attention_triton_backward_efficiency": 0.2}
    spec = spec_from_dict(raw)
    assert spec.efficiency.attention["triton"].backward == 0.2
    triton = h100.efficiency.attention["triton"]
    assert spec.efficiency.attention["triton"].forward == triton.forward
    assert spec.efficiency.attention["flash3"] == h100.efficiency.attention["flash3"]
    assert spec.to_dict()["efficiency"]["attention_triton_backward_efficiency"] == 0.2
    assert list(spec.to_dict()["efficiency"]) == list(Efficiency.field_names())
    raw["efficiency"] = {"attention_nope_forward_efficiency": 0.5}
    with pytest.raises(DlperfError, match="is not a known constant"):
        spec_from_dict(raw)
