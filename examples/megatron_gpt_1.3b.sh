# A Megatron-LM launch, as examples/gpt3 scripts pass the arguments:
# GPT 1.3B (24 layers, hidden 2048, 16 heads), tensor parallel 2, flash
# attention, selective recompute, the distributed optimizer.
torchrun --nproc_per_node 8 pretrain_gpt.py \
    --num-layers 24 \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --micro-batch-size 4 \
    --global-batch-size 256 \
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 1 \
    --sequence-parallel \
    --use-flash-attn \
    --recompute-granularity selective \
    --use-distributed-optimizer \
    --bf16 \
    --lr 2.0e-4 \
    --min-lr 2.0e-5 \
    --train-iters 500000 \
    --weight-decay 0.1 \
    --clip-grad 1.0 \
    --data-path my-gpt2_text_document \
    --vocab-file gpt2-vocab.json \
    --merge-file gpt2-merges.txt \
    --log-interval 100
