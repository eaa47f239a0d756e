"""issue 35: the host issuing Transformer Engine's grouped experts one by one
(Megatron-Core's TEGroupedMLP outside CUDA graphs), derived by hand; and
`--cuda-graph-scope`, which says whether the graphs hold them."""

import pytest

import dlperf
from dlperf.errors import DlperfError
from dlperf.parallel import Layout, ModelProfile
from dlperf.parallel.compute import stage_times
from dlperf.parallel.ep_overlap import LayerChunks
from dlperf.parallel.expert_host import experts_exposed_s, experts_issue_s
from dlperf.run_config import experts_graphed

MS = 1e-3
MOE = ("hf:qwen3_moe:layers=2,hidden=128,heads=4,kv_heads=2,vocab=1000,experts=8,top_k=2,"
       "expert_mlp=64")


def test_the_experts_issue_shows_beyond_their_gpu_time_and_the_hosts_lead():
    # 16 local experts at 50 us a GEMM: forward 16 x 2 x 50 = 1.6 ms, backward
    # (dgrad and wgrad of fc1 and fc2) 16 x 4 x 50 = 3.2 ms
    assert experts_issue_s(16, 50e-6) == pytest.approx((1.6 * MS, 3.2 * MS))
    chunks = LayerChunks(1 * MS, 0.5 * MS, 0.4 * MS, 0.8 * MS)
    forward, backward = experts_exposed_s(16, chunks, 50e-6)
    # forward: the dispatcher's read-back leaves no lead: 1.6 - 0.4 = 1.2 ms;
    # backward: the lead of 0.5 ms of attention backward, then 3.2 - 0.8 - 0.5 = 1.9 ms
    assert (forward, backward) == pytest.approx((1.2 * MS, 1.9 * MS))
    # 2 experts issue in 0.2 / 0.4 ms, under their GPU time: nothing shows
    assert experts_exposed_s(2, chunks, 50e-6) == (0.0, 0.0)


def test_a_plans_blocks_carry_the_experts_issue_per_moe_layer():
    profile = ModelProfile(
        name="m", params=8e8, block_params=8e8, blocks=8, micro_batch=1,
        tokens_per_sample=1000, precision="amp-bf16", optimizer="adamw",
        block_forward_s=1 * MS, block_backward_s=2 * MS, block_split_share=1.0,
        experts=64, moe_layers=4, block_moe_forward_s=0.2 * MS,
        block_moe_backward_s=0.4 * MS, expert_gemm_host_s=50e-6,
    )  # fmt: skip
    times = stage_times(profile, Layout(dp=8, tp=1, pp=1, ep=4, micro_batches=1))
    # 64 / 4 = 16 local experts; 4 MoE layers over 8 blocks hold twice a block's
    # average expert time: 0.4 ms forward, 0.8 ms backward; the attention's backward
    # (the lead) is 2 - 0.4 = 1.6 ms. Forward shows 1.6 - 0.4 = 1.2 ms, backward
    # max(0, 3.2 - 0.8 - 1.6) = 0.8 ms, each on half the blocks
    assert times.experts_host_forward_s == pytest.approx(1.2 * MS)
    assert times.experts_host_backward_s == pytest.approx(0.8 * MS)
    assert times.block_forward_s == pytest.approx(1 * MS + 1.2 * MS / 2)
    assert times.block_backward_s == pytest.approx(2 * MS + 0.8 * MS / 2)


def test_which_graph_scopes_hold_the_experts():
    assert experts_graphed(True, None) and experts_graphed(True, "full")
    assert experts_graphed(True, "attn+moe")  # Megatron-Core's moe scope: the whole layer
    assert not experts_graphed(True, "attn+moe_router+moe_preprocess")
    assert not experts_graphed(False, None)


def test_a_partial_graph_scope_leaves_the_experts_to_the_host():
    plan = dict(gpu="b200", gpus=8, dp=8, tp=1, pp=1, ep=8, kernels="te", batch=1,
                seq_len=256, cuda_graphs=True)  # fmt: skip
    full = dlperf.plan(MOE, **plan).plans[0]
    partial = dlperf.plan(MOE, cuda_graph_scope="attn+moe_router", **plan).plans[0]
    assert partial.step_time_s > full.step_time_s
    # the model's own eager experts (no Transformer Engine) have no such issue
    eager = dict(plan, kernels="eager")
    assert (dlperf.plan(MOE, cuda_graph_scope="attn", **eager).plans[0].step_time_s
            == pytest.approx(dlperf.plan(MOE, **eager).plans[0].step_time_s))  # fmt: skip


@pytest.mark.parametrize(("options", "says"), [
    (dict(cuda_graph_scope="attn"), "give --cuda-graphs too"),
    (dict(cuda_graphs=True, cuda_graph_scope="attn+router"), "unknown --cuda-graph-scope module"),
])  # fmt: skip
def test_a_bad_graph_scope_is_refused_in_one_line(options, says):
    with pytest.raises(DlperfError, match=says):
        dlperf.plan(MOE, gpu="b200", gpus=8, ep=8, **options)


def test_one_gpus_verbs_refuse_a_graph_scope():
    with pytest.raises(DlperfError, match="give it to dlperf plan"):
        dlperf.analyze(MOE, gpu="b200", cuda_graphs=True, cuda_graph_scope="attn")
