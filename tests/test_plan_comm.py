"""Collectives of parallel plans, derived in the open: FSDP's gathers per
micro-batch with prefetch, pipeline sends and the bubble, tensor-parallel
all-reduces in the math dtype, DDP's bucketed all-reduce, expert all-to-all,
context parallelism's ring, and which link each group runs on."""

import pytest

import dlperf
from dlperf.parallel import (
    Interconnect,
    Layout,
    ModelProfile,
    interconnect_for,
    parse_schedule,
    price,
)

# 100 GB/s within a node, a node network of 200 GB/s (25 GB/s per GPU), no latency
NET = Interconnect(100e9, 25e9, 0.0, 8, 200e9)
SPEC = dlperf.gpu("h100")


def _profile(**changes) -> ModelProfile:
    base = dict(
        name="m",
        params=800_000_000,
        block_params=800_000_000,  # 8 blocks of 1e8 parameters
        blocks=8,
        micro_batch=1,
        tokens_per_sample=1000,
        precision="amp-bf16",
        optimizer="adamw",
        boundary_elements=1e6,  # b s h of the activation between blocks
        activation_itemsize=2,
        block_forward_s=1e-3,
        block_backward_s=2e-3,
        block_split_share=1.0,
    )
    base.update(changes)
    return ModelProfile(**base)


def _plan(profile=None, **layout):
    return price(profile or _profile(), SPEC, NET, Layout(**layout))


def test_fsdp_gathers_every_block_twice_per_micro_batch_and_overlaps_what_it_can():
    # gradients reduced in bf16 (--reduce-dtype bf16, FSDP's PURE)
    layout = dict(dp=8, tp=1, pp=1, sharding="fsdp", micro_batches=4)
    plan = _plan(_profile(reduce_bytes=2), **layout)
    gather, scatter = plan.collectives[0], plan.collectives[1]
    # each block's 1e8 bf16 weights (2e8 B), forward and backward, 4 micro-batches
    assert (gather.op, gather.count, gather.bytes) == ("all_gather", 2 * 8 * 4, 64 * 2e8)
    assert (scatter.op, scatter.count, scatter.bytes) == ("reduce_scatter", 8 * 4, 32 * 2e8)
    # in fp32, the default, each block's gradients are 4e8 B: twice the bytes and time
    fp32 = _plan(**layout).collectives[1]
    assert fp32.bytes == 32 * 4e8 and fp32.time_s == pytest.approx(2 * scatter.time_s)
    one = 7 / 8 * 2e8 / 100e9  # 1.75 ms per gather or scatter over 8 GPUs
    assert gather.time_s == pytest.approx(64 * one)
    # forward: the first gather, then 7 gathers behind 1 ms blocks: 1.75 + 7 x 0.75 ms
    # backward: gather + scatter (3.5 ms) behind 2 ms blocks, 8 x 1.5 ms, + the last scatter
    forward, backward = one + 7 * (one - 1e-3), 8 * (2 * one - 2e-3) + one
    assert gather.exposed_time_s == pytest.approx(4 * forward)
    assert scatter.exposed_time_s == pytest.approx(4 * backward)
    assert plan.exposed_comm_s == pytest.approx(4 * (forward + backward))


def test_pipeline_sends_once_per_micro_batch_per_boundary_in_bf16():
    # tp 2 x pp 4 on 8 GPUs of one node, 8 micro-batches
    plan = _plan(dp=1, tp=2, pp=4, schedule=parse_schedule("1f1b"), micro_batches=8)
    sends = plan.collective("pp send")
    each = 1e6 * 2 / 2  # b s h in bf16 (not fp32), a tp-th of it per GPU: 1 MB
    assert sends.count == 2 * 8 and sends.bytes == 16 * each
    # the critical path holds 2 (m + p - 1) = 22 sends of 10 us: the step's exposed
    # communication; one GPU's sends are exposed at most for their own 16 (issue 23, item 7:
    # the pipeline's fill and drain are the bubble's)
    tp = plan.collective("tp all_reduce")  # exposed in each of the m + p - 1 = 11 slots
    assert plan.exposed_comm_s == pytest.approx(22 * each / 100e9 + tp.exposed_time_s * 11 / 8)
    assert sends.exposed_time_s == pytest.approx(16 * each / 100e9) == sends.time_s
    # the bubble: 2 blocks per stage at 1.5 ms (3 ms / tp 2), (p - 1) x 3 ms = 3/8 of 8 x 3 ms
    assert plan.bubble_time_s == pytest.approx(3 * 3e-3)
    interleaved = _plan(dp=1, tp=2, pp=4, schedule=parse_schedule("interleaved:2"), micro_batches=8)
    assert interleaved.bubble_time_s == pytest.approx(3 * 3e-3 / 2)  # (p - 1)/(m V)
    sends = interleaved.collective("pp send")
    assert sends.count == 2 * 8 * 2  # V times as many boundaries
    assert sends.exposed_time_s == pytest.approx(sends.time_s)


def test_tensor_parallel_all_reduces_per_block_in_the_math_dtype():
    plan = _plan(dp=1, tp=8, pp=1, micro_batches=2)
    tp = plan.collective("tp all_reduce")
    # 4 per block (2 forward, 2 backward) x 8 blocks + embedding and head = 34 per micro-batch
    assert tp.count == 34 * 2 and tp.bytes == 68 * 1e6 * 2  # bf16 under AMP
    assert tp.exposed_time_s == pytest.approx(68 * 2 * 7 / 8 * 2e6 / 100e9)
    # a checkpointed block runs its forward, and its two all-reduces, again
    full = _plan(_profile(checkpoint="full"), dp=1, tp=8, pp=1, micro_batches=2)
    assert full.collective("tp all_reduce").count == (6 * 8 + 2) * 2
    # sequence parallelism: all-gather + reduce-scatter, the same ring volume
    sp = _plan(dp=1, tp=8, pp=1, micro_batches=2, sequence_parallel=True)
    assert sp.collective("tp all_gather+reduce_scatter").time_s == pytest.approx(tp.time_s)


def test_sequence_parallel_gathers_fp8_inputs_under_fp8():
    # Transformer Engine's current scaling with sequence parallelism casts each
    # linear layer's local input (and output gradient) to fp8 and all-gathers
    # the fp8 shards; the reduce-scatters stay bf16, as do the embedding's and
    # head's pairs. The links have no latency here, so a ring's time is its
    # bytes: a bf16 pair is 2 x 7/8 x 2e6 B / 100 GB/s = 35 us, an fp8 block's
    # pair 7/8 x (2e6 + 1e6) / 100e9 = 26.25 us.
    layout = dict(dp=1, tp=8, pp=1, micro_batches=2, sequence_parallel=True)
    bf16 = _plan(**layout).collective("tp all_gather+reduce_scatter")
    fp8 = _plan(_profile(precision="fp8"), **layout).collective("tp all_gather+reduce_scatter")
    pair, fp8_pair = 2 * 7 / 8 * 2e6 / 100e9, 7 / 8 * 3e6 / 100e9
    # per micro-batch 4 x 8 block pairs and 2 more, 2 micro-batches
    assert bf16.time_s == pytest.approx(68 * pair)
    assert fp8.count == bf16.count == 68
    assert fp8.time_s == pytest.approx(2 * (32 * fp8_pair + 2 * pair))
    assert fp8.bytes == pytest.approx(2 * (32 * 0.75 * 2e6 + 2 * 2e6))
    # without sequence parallelism the all-reduces stay bf16
    plain = dict(layout, sequence_parallel=False)
    assert _plan(_profile(precision="fp8"), **plain).collective("tp all_reduce").time_s == (
        pytest.approx(_plan(**plain).collective("tp all_reduce").time_s)
    )


def test_ddp_all_reduces_fp32_gradients_once_per_step_behind_backward():
    plan = _plan(dp=8, tp=1, pp=1, micro_batches=4)
    reduce = plan.collective("dp all_reduce")
    assert reduce.count == 1 and reduce.bytes == 4 * 8e8  # fp32 gradients under AMP
    ring = 2 * 7 / 8 * 3.2e9 / 100e9  # 56 ms
    assert reduce.time_s == pytest.approx(ring)
    # behind the last micro-batch's backward (8 blocks x 2 ms): 56 - 16 = 40 ms exposed
    assert reduce.exposed_time_s == pytest.approx(ring - 16e-3)
    # a short all-reduce hides but for its last 25 MiB bucket
    small = _plan(_profile(params=10_000_000, block_params=10_000_000), dp=8, tp=1, pp=1)
    r = small.collective("dp all_reduce")
    assert r.exposed_time_s == pytest.approx(r.time_s * 26_214_400 / 4e7)


def test_zero1_and_zero2_scatter_gradients_and_gather_weights():
    z1 = _plan(dp=8, tp=1, pp=1, sharding="zero1", micro_batches=4)
    assert z1.collective("dp reduce_scatter").count == 1  # once per step
    gather = z1.collective("dp all_gather")
    assert gather.bytes == 2 * 8e8 and gather.exposed_time_s == gather.time_s
    z2 = _plan(dp=8, tp=1, pp=1, sharding="zero2", micro_batches=4)
    assert z2.collective("dp reduce_scatter").count == 4  # every micro-batch


def test_expert_all_to_all():
    moe = _profile(experts=8, top_k=2, moe_layers=8, moe_tokens=4096, moe_hidden=1024)
    plan = _plan(moe, dp=8, tp=1, pp=1, ep=4, micro_batches=2)
    a2a = plan.collective("ep all_to_all")
    # tokens x top-k x hidden x 2 B = 16.8 MB, (ep - 1)/ep of it leaving each GPU
    nbytes = 4096 * 2 * 1024 * 2
    assert a2a.count == 4 * 8 * 2  # dispatch and combine, forward and backward
    assert a2a.bytes == a2a.count * nbytes
    assert a2a.exposed_time_s == pytest.approx(a2a.count * 3 / 4 * nbytes / 100e9)


def test_an_all_to_all_across_nodes_leaves_through_each_gpus_own_nic():
    """issue 35: an all-to-all of 32 ranks over 4 nodes was priced as a ring whose
    crossings share the node's 8 NICs (200 GB/s here); its sends to other nodes
    leave through each GPU's own NIC (25 GB/s)."""
    from dlperf.parallel.collectives import all_to_all_time_s

    nbytes = 32e6
    # 8 of the 32 ranks in the node: 7/32 of the buffer over NVLink (100 GB/s, 70 us),
    # 24/32 through the NIC (25 GB/s: 960 us); at once: the NIC's 960 us
    assert all_to_all_time_s(nbytes, 32, NET) == pytest.approx(24 / 32 * nbytes / 25e9)
    # within a node as before: (8 - 1)/8 of it over NVLink
    assert all_to_all_time_s(nbytes, 8, NET) == pytest.approx(7 / 8 * nbytes / 100e9)
    # DeepEP's dispatch of top-8 copies: a token reaches 3 x (1 - (3/4)^8) = 2.70 other
    # nodes of 4, once each: 32e6 / 8 x 2.70 = 10.8 MB through the NIC (432 us), not the
    # plain 24 MB; its copies on within the node, 31/32 over NVLink (310 us), at once
    remote = nbytes / 8 * 3 * (1 - 0.75**8) / 25e9
    assert all_to_all_time_s(nbytes, 32, NET, top_k=8) == pytest.approx(remote)
    assert remote == pytest.approx(432e-6, rel=1e-3)


def test_expert_all_to_all_hides_behind_the_compute_it_is_paired_with():
    """issue 35: NVIDIA's newer MoE recipes set moe_a2a_overlap (Megatron-Core's
    --overlap-moe-expert-parallel-comm). dlperf hid each micro-batch's all-to-alls
    behind its whole stage; the schedule pairs each with one stretch of another
    micro-batch's layer: combine bwd | attention fwd, the dispatches | the
    experts' backward and forward, combine fwd | attention bwd."""
    from dlperf.parallel.ep_overlap import LayerChunks, overlapped_exposed_s, paired_layer_s

    ms = 1e-3
    chunks = LayerChunks(1 * ms, 2 * ms, 1.5 * ms, 3 * ms)  # 7.5 ms of compute
    # all-to-alls of 2 ms: first max(2, 1) = 2; middle: dgrad = wgrad = 1.5, the
    # experts' forward waits for max(3, 2) = 3 and ends at 4.5, the backward
    # dispatch starts at max(2, 1.5) = 2 and ends at 4: 4.5; last max(2, 2) = 2
    assert paired_layer_s(2 * ms, chunks) == pytest.approx(8.5 * ms)
    # 4 micro-batches: one's 4 all-to-alls show whole, 3 pairs show 1 ms each
    assert overlapped_exposed_s(2 * ms, chunks, 4) == pytest.approx((8 + 3 * 1) / 4 * ms)
    assert overlapped_exposed_s(2 * ms, chunks, 1) == pytest.approx(8 * ms)  # no partner
    # the all-to-all's kernels hold a quarter of the SMs: attention fwd beside 2 ms
    # of it runs 1 / 0.75 = 1.33 ms (hidden); attention bwd would take 2.67 ms, longer
    # than the 2 ms, so 2 + 2 x 0.25 = 2.5; the middle's 4.5 ms beside 4 ms of
    # dispatches: 4.5 + 4 x 0.25 = 5.5 (its dependencies then hold: 3.67 + 1.83)
    assert paired_layer_s(2 * ms, chunks, 0.25) == pytest.approx((2 + 5.5 + 2.5) * ms)

    moe = dict(experts=8, top_k=2, moe_layers=8, moe_tokens=4096, moe_hidden=1024,
               block_moe_forward_s=0.4e-3, block_moe_backward_s=0.8e-3)  # fmt: skip
    layout = dict(dp=8, tp=1, pp=1, ep=4, micro_batches=4)
    plain = _plan(_profile(**moe), **layout).collective("ep all_to_all")
    hidden = _plan(_profile(**moe, ep_comm_overlap=True), **layout).collective("ep all_to_all")
    # each call 3/4 x 16.8 MB at 100 GB/s = 126 us; a layer's stretches (0.6 ms of
    # attention forward, 0.4 + 0.4 + 0.4 ms of experts, 1.2 ms of attention backward)
    # hide each: only the unpaired micro-batch's quarter shows
    assert hidden.time_s == plain.time_s
    assert hidden.exposed_time_s == pytest.approx(plain.exposed_time_s / 4)
    # the same compute with the attention's forward 0.1 ms: the stage (3 ms a layer)
    # still dwarfs the 0.5 ms of all-to-alls, but the backward combine (126 us) shows
    # 26 us beside it in every pair
    a2a = 3 / 4 * 4096 * 2 * 1024 * 2 / 100e9
    short = dict(moe, block_moe_forward_s=0.9e-3)
    shown = _plan(_profile(**short, ep_comm_overlap=True), **layout).collective("ep all_to_all")
    per_layer = (4 * a2a + 3 * (a2a - 0.1e-3)) / 4
    assert shown.exposed_time_s == pytest.approx(4 * 8 * per_layer)


def test_an_overlapped_collective_holds_nccls_channels_worth_of_sms():
    from dlperf.parallel.collectives import collective_sm_share

    # H100 SXM: 18 channels (one per NVLink), one SM each, of 132 SMs
    net = interconnect_for(dlperf.gpu("h100-sxm5-80gb"), 8)
    assert collective_sm_share(net) == pytest.approx(18 / 132)
    assert collective_sm_share(NET) == 0.0  # links built by hand: no SMs known


def test_expert_parallel_options_need_experts():
    model = "hf:llama:layers=2,hidden=128,heads=4,kv_heads=2,mlp=256,vocab=1000"
    with pytest.raises(dlperf.DlperfError, match="has no experts"):
        dlperf.plan(model, gpu="h100", gpus=2, overlap_ep_comm=True)
    with pytest.raises(dlperf.DlperfError, match="has no experts"):
        dlperf.plan(model, gpu="h100", gpus=2, moe_dispatcher="flex")
    with pytest.raises(dlperf.DlperfError, match="moe-dispatcher"):
        dlperf.plan(model, gpu="h100", gpus=2, moe_dispatcher="deepep")
    with pytest.raises(dlperf.DlperfError, match="give it to dlperf plan"):
        dlperf.analyze(model, gpu="h100", overlap_ep_comm=True)


def test_context_parallel_ring_hides_behind_attention():
    p = _profile(kv_elements=2e6, block_attention_s=1e-4)
    plan = _plan(p, dp=4, tp=1, pp=1, cp=2, micro_batches=1)
    ring = plan.collective("cp send")
    local = 2e6 * 2 / 2  # this GPU's K and V chunk: 2 MB
    one = local / 100e9  # 20 us
    # forward 1 step, backward 2 (K, V and their gradients): 60 us per block, of
    # which the attention's 50 us (1e-4 s / cp 2) hides all but 10 us
    assert ring.count == 3 * 8
    assert ring.exposed_time_s == pytest.approx(8 * (3 * one - 5e-5))


def test_links_follow_the_ranks_places():
    # dp ranks 8 apart (beside tp 8) are one per node: one NIC each, 25 GB/s
    assert NET.ring_bytes_per_s(8, stride=8) == 25e9
    # 16 consecutive ranks: 8 per node, the node's whole network, capped by the GPU's link
    assert NET.ring_bytes_per_s(16, stride=1) == 100e9
    assert NET.ring_bytes_per_s(8, stride=1) == 100e9  # within a node: NVLink
    # NCCL's model caps an A100 ring at 235 GB/s of its 300 GB/s NVLink
    a100 = interconnect_for(dlperf.gpu("a100"), 8)
    assert a100.ring_bytes_per_s(8) == 235e9
    # the node network by generation: DGX H100 8 x 400 Gb/s, DGX A100 8 x 200 Gb/s
    assert interconnect_for(dlperf.gpu("h100"), 8).node_network == 400e9
    assert a100.node_network == 200e9 and a100.inter_node_bytes_per_s == 25e9


def test_a_gb200_nvl72_prices_groups_across_its_trays_on_nvlink():
    """GB200 NVL72 joins 72 GPUs, 4 to a tray, by one NVLink fabric: a group of up
    to 72 runs on NVLink, not on the trays' NICs; beyond, each GPU's NIC."""
    import dataclasses

    from dlperf.parallel.collectives import collective_time_s

    gb200 = dlperf.gpu("gb200")
    assert gb200.nvlink_domain_gpus == 72 and gb200.peak_flops_per_s("bf16") == 2.5e15
    net = interconnect_for(gb200, 4, gpus=256)
    assert net.gpus_per_node == 72  # the ring model's node is the NVLink domain
    assert net.within_node(64) and not net.within_node(64, stride=2)
    assert net.ring_bytes_per_s(64) == net.intra_ring_bytes_per_s
    # beyond the domain: one 400 Gb/s NIC per GPU, the domain's 72 together
    assert net.inter_node_bytes_per_s == 50e9 and net.node_network == 72 * 50e9
    assert net.ring_bytes_per_s(4, stride=72) == 50e9
    # a small job fills only its own GPUs
    assert interconnect_for(gb200, 4, gpus=16).gpus_per_node == 16
    # the same GPU without the domain: a tensor-parallel group of 16 spans 4 trays' NICs
    trays = interconnect_for(dataclasses.replace(gb200, nvlink_domain_gpus=None), 4, gpus=256)
    assert trays.gpus_per_node == 4
    nbytes = 64 * 2**20
    on_nvlink = collective_time_s("all_reduce", nbytes, 16, net)
    assert on_nvlink < collective_time_s("all_reduce", nbytes, 16, trays) / 2
    # a DGX node's GPUs are their own domain, as before
    assert interconnect_for(dlperf.gpu("h100"), 8, gpus=64).gpus_per_node == 8


def test_a_plan_on_gb200_searches_tensor_parallelism_across_trays():
    """The planner searches TP past a 4-GPU tray inside the NVLink domain."""
    report = dlperf.plan(
        "hf:llama:layers=2,hidden=1024,heads=16,kv_heads=16,mlp=4096,vocab=32000",
        gpu="gb200", gpus=16, gpus_per_node=4, global_batch=16, micro_batch=1, seq_len=512,
        dp=1, pp=1, cp=1, sharding="none", checkpoint="none",
    )  # fmt: skip
    assert report.gpus_per_node == 4 and report.nvlink_domain == 16
    assert {p.tp for p in report.plans} == {16}


def test_fp8_weights_are_gathered_in_fp8():
    # Megatron's fp8 recipes keep fp8 parameters (fp8_param_gather): FSDP gathers
    # each block's 1e8 weights as 1e8 B, not 2e8 B of bf16; the gradients still
    # reduce in fp32. zero1 gathers the updated block weights after the step in
    # fp8 too: 8 blocks x 1e8 = 8e8 B where bf16 moves 1.6e9 B.
    fsdp = dict(dp=8, tp=1, pp=1, sharding="fsdp", micro_batches=4)
    bf16 = _plan(**fsdp).collectives
    fp8 = _plan(_profile(precision="fp8"), **fsdp).collectives
    assert bf16[0].bytes == 64 * 2e8 and fp8[0].bytes == 64 * 1e8
    assert fp8[0].time_s == pytest.approx(bf16[0].time_s / 2)
    assert fp8[1].bytes == bf16[1].bytes == 32 * 4e8
    zero1 = dict(dp=8, tp=1, pp=1, sharding="zero1", micro_batches=4)
    assert _plan(**zero1).collective("dp all_gather").bytes == 1.6e9
    assert _plan(_profile(precision="fp8"), **zero1).collective("dp all_gather").bytes == 8e8
