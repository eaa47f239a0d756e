"""The catalogue, spec files and the seeds' hardware figures."""

import csv
import json

import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.hardware import load_spec_file

from .conftest import SHARED_DATA

REQUIRED_IDS = [
    "p4",
    "p100-pcie-16gb",
    "p100-sxm2-16gb",
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "v100-pcie-16gb",
    "v100-pcie-32gb",
    "t4",
    "a10",
    "a40",
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "l4",
    "l40s",
    "h100-sxm5-80gb",
    "h100-pcie-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "rtx-3090",
    "rtx-4090",
    "gtx-1080-ti",
    "titan-xp",
    "m40",
]


def test_catalogue_has_every_required_device():
    ids = {s.id for s in dlperf.gpus()}
    assert set(REQUIRED_IDS) <= ids


def test_every_gpu_in_the_measured_data_is_in_the_catalogue():
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    seen = set()
    for path in SHARED_DATA.glob("*/*.csv"):
        with open(path) as f:
            seen |= {row["gpu"] for row in csv.DictReader(f)}
    ids = {s.id for s in dlperf.gpus()}
    assert seen <= ids, f"missing: {sorted(seen - ids)}"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a100", "a100-sxm4-80gb"),
        ("h100", "h100-sxm5-80gb"),
        ("v100", "v100-sxm2-16gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("NVIDIA A100-PG509-200", "a100-sxm4-40gb"),
        ("Tesla T4", "t4"),
        ("A100-SXM4-80GB", "a100-sxm4-80gb"),
    ],
)
def test_aliases_and_device_strings(name, expected):
    assert dlperf.gpu(name).id == expected


@pytest.mark.parametrize("spec", dlperf.gpus(), ids=lambda s: s.id)
def test_peaks_agree_with_sms_clock_and_macs(spec):
    # datasheet peak == SMs x clock x multiply-adds/clock/SM x 2, within 3%
    for dtype in spec.math:
        computed = spec.computed_peak_flops_per_s(dtype)
        assert spec.peak_flops_per_s(dtype) == pytest.approx(computed, rel=0.03), dtype


@pytest.mark.parametrize("spec", dlperf.gpus(), ids=lambda s: s.id)
def test_every_spec_cites_sources(spec):
    assert spec.sources and all(len(s) > 10 for s in spec.sources)


def test_a100_peaks_from_the_seed():
    a100 = dlperf.gpu("a100")
    # 108 SMs x 1.41 GHz x 1024 FP16 FMA/clk/SM x 2 = 311.9 TFLOPS (seed: 312)
    assert a100.computed_peak_flops_per_s("fp16") == pytest.approx(108 * 1.41e9 * 1024 * 2)
    assert a100.peak_flops_per_s("fp16") == pytest.approx(312e12)
    # TF32: 512 FMA/clk/SM -> 155.9 TFLOPS (seed: 156)
    assert a100.computed_peak_flops_per_s("tf32") == pytest.approx(108 * 1.41e9 * 512 * 2)
    assert a100.peak_flops_per_s("tf32") == pytest.approx(156e12)
    assert a100.uses_tensor_cores("tf32") and not a100.uses_tensor_cores("fp32")


def test_v100_ops_per_byte():
    # 125 TFLOPS / 900 GB/s = 138.9 FLOPs/B (seed)
    assert dlperf.gpu("v100").ridge_ops_per_byte("fp16") == pytest.approx(138.9, abs=0.05)


def test_tensor_core_alignment_table():
    # seed Table 1: multiples of 8 (fp16), 4 (tf32), 16 (int8), 2 (fp64) = 16 bytes;
    # on A100: 64, 32, 128, 16 = 128 bytes.
    a100 = dlperf.gpu("a100")
    assert a100.alignment_elements("fp16") == (8, 64)
    assert a100.alignment_elements("tf32") == (4, 32)
    assert a100.alignment_elements("int8") == (16, 128)
    assert a100.alignment_elements("fp64") == (2, 16)
    assert dlperf.gpu("v100").alignment_elements("fp16") == (8, 8)


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(DlperfError, match="unknown GPU 'a10O'.*a100"):
        dlperf.gpu("a10O")


def _write_spec(path, **changes):
    doc = json.loads(json.dumps(dlperf.gpu("t4").to_dict()))
    doc.pop("efficiency")
    doc.pop("path")
    doc.update(changes)
    path.write_text(json.dumps(doc))
    return path


def test_user_spec_file_round_trips(tmp_path):
    path = _write_spec(tmp_path / "mine.json", id="my-t4", aliases=[])
    spec = dlperf.gpu(str(path))
    assert spec.id == "my-t4"
    assert spec.peak_flops_per_s("fp16") == dlperf.gpu("t4").peak_flops_per_s("fp16")
    # the family's efficiency constants come with it
    assert spec.efficiency == dlperf.gpu("t4").efficiency


def test_user_toml_spec_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(
        'id = "tiny"\nname = "Tiny GPU"\narchitecture = "ampere"\nsm_count = 10\n'
        "boost_clock_mhz = 1000\nmemory_bytes = 1e9\nmemory_bandwidth_bytes_per_s = 1e11\n"
        "l2_cache_bytes = 1048576\n[math.fp16]\npeak_flops_per_s = 10.24e12\n"
        "macs_per_clock_per_sm = 512\ntensor_cores = true\n"
    )
    spec = load_spec_file(path)
    # 10 SMs x 1 GHz x 512 x 2 = 10.24 TFLOPS
    assert spec.computed_peak_flops_per_s("fp16") == pytest.approx(10.24e12)
    assert dlperf.gemm(64, 64, 64, dtype="fp16", gpu=str(path)).gpu == "tiny"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"sm_count": -3}, "sm_count"),
        ({"sm_count": "many"}, "sm_count"),
        ({"memory_bandwidth_bytes_per_s": 0}, "memory_bandwidth_bytes_per_s"),
        ({"architecture": "kepler9"}, "architecture"),
        ({"math": {"fp17": {}}}, "math.fp17"),
        ({"math": {"fp16": {"peak_flops_per_s": 1e12}}}, "math.fp16.macs_per_clock_per_sm"),
    ],
)
def test_malformed_spec_names_the_bad_field(tmp_path, change, field):
    path = _write_spec(tmp_path / "bad.json", **change)
    with pytest.raises(DlperfError, match=f"field '{field}'") as err:
        dlperf.gpu(str(path))
    assert "\n" not in str(err.value)


def test_missing_field_and_broken_toml(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('id = "x"\nname = ')
    with pytest.raises(DlperfError, match="not valid TOML"):
        dlperf.gpu(str(path))
    path.write_text('id = "x"\n')
    with pytest.raises(DlperfError, match="field 'name' is missing"):
        dlperf.gpu(str(path))


def test_dtype_the_gpu_lacks():
    with pytest.raises(DlperfError, match="v100-sxm2-16gb has no fp8 math"):
        dlperf.gemm(64, 64, 64, dtype="fp8", gpu="v100")


def test_power_limit_slows_low_tdp_cards_only():
    # The 70 W T4 cannot hold its boost clock on CUDA cores; a 300 W V100 can.
    assert dlperf.gpu("t4").sustained_clock_fraction() < 1.0
    assert dlperf.gpu("v100").sustained_clock_fraction() == 1.0


def test_a_gpu_generation_is_one_architecture_table():
    """Adding a generation is one table of `_architectures.toml`: every table
    sets only constants the [default] table names (the rest default) and the
    family's Tensor Core alignments, and every catalogue card's family has its
    table."""
    from dlperf.hardware.spec import _architecture_defaults

    tables = _architecture_defaults()
    known = {*tables["default"], "tensor_alignment_bytes", "tensor_best_alignment_bytes"}
    for family, table in tables.items():
        assert set(table) <= known, (family, sorted(set(table) - known))
    for spec in dlperf.gpus():
        assert spec.architecture in tables, spec.id
