#!/usr/bin/env bash
# One device lease: time the kernels (bench/device/kernels.py), then run dlperf's
# CUDA paths (calibrate's probe, measure with a profiler trace). Everything lands
# under $OUT; bench/device/README.md says where the figures were kept.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
py=python3
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
$py -c "import torch, transformers, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__, 'torchvision', torchvision.__version__)" | tee "$OUT/versions.txt"
timeout 200 $py bench/device/kernels.py "$OUT/kernels.jsonl" 2>&1 | tee "$OUT/kernels.log"
run() {  # name, seconds, dlperf arguments...
    local name=$1 limit=$2
    shift 2
    echo "== $name: dlperf $*"
    timeout "$limit" $py -m dlperf "$@" >"$OUT/$name.out" 2>&1
    echo "exit $?"
    tail -5 "$OUT/$name.out"
}
run calibrate 45 calibrate --device cuda --out "$OUT/calibrated.toml"
run measure_resnet50 90 measure torchvision:resnet50 --device cuda --precision amp-bf16 \
    --batch 128 --steps 5 --trace-out "$OUT/resnet50.json"
run measure_llama 100 measure hf:meta-llama/Meta-Llama-3-8B:layers=4 --device cuda \
    --precision bf16 --batch 1 --seq-len 4096 --steps 3 --trace-out "$OUT/llama.json"
gzip -f "$OUT"/*.json 2>/dev/null
ls -la "$OUT"
