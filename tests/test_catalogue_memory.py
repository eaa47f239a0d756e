"""The catalogue's memory sizes use one unit: the vendor's "GB" of GPU memory is binary."""

import re

import dlperf


def test_every_memory_size_is_whole_gib_and_matches_the_id():
    for spec in dlperf.gpus():
        if spec.kind == "cpu":
            continue
        assert spec.memory_bytes % 2**30 == 0, spec.id
        stated = re.search(r"-(\d+)gb$", spec.id)
        if stated:  # "h200-sxm-141gb": 141 GiB
            assert spec.memory_bytes == int(stated.group(1)) * 2**30, spec.id


def test_capacity_holds_what_nvidia_smi_reports_usable():
    # nvidia-smi totals, in MiB, of the usable memory: a capacity below them is wrong
    usable_mib = {"h100-sxm5-80gb": 81559, "h200-sxm-141gb": 143771}
    for gpu, mib in usable_mib.items():
        assert dlperf.gpu(gpu).memory_bytes >= mib * 2**20, gpu
