# A vLLM server launch: `dlperf serve --config` takes its engine settings.
vllm serve meta-llama/Llama-3.1-8B \
    --tensor-parallel-size 1 \
    --max-num-seqs 256 \
    --max-num-batched-tokens 8192 \
    --gpu-memory-utilization 0.9 \
    --dtype bfloat16 \
    --port 8000
