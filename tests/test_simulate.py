"""The serving simulator (`dlperf serve --request-rate ...`): workloads, the
continuous-batching scheduler on step costs chosen by hand, and the whole
run on a tiny decoder. Expected values are derived in the comments."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dlperf.cli import main
from dlperf.errors import DlperfError
from dlperf.serving import serve
from dlperf.serving.scheduler import EngineLimits, run_engine
from dlperf.serving.simulate import Simulator, parse_slo
from dlperf.serving.workload import Workload, workload

LLAMA = "hf:llama:layers=2,hidden=128,heads=4,kv_heads=2,mlp=256,vocab=1000"


class SecondPerStep:
    """Every engine step takes one second, whatever it runs; it keeps what it was given."""

    def __init__(self):
        self.steps = []

    def step_s(self, decodes, decode_cached, chunks):
        self.steps.append((decodes, list(chunks)))
        return 1.0

    def decode_s(self, batch, mean_cached):
        return 1.0


def requests(arrivals, inputs, outputs) -> Workload:
    return Workload(np.array(arrivals, float), np.array(inputs), np.array(outputs), "test")


def limits(**kw) -> EngineLimits:
    base = {"max_num_seqs": 8, "max_num_batched_tokens": 64, "kv_blocks": 100, "block_size": 4}
    return EngineLimits(**{**base, **kw})


# -- the scheduler ------------------------------------------------------------------------


def test_one_request_prefills_then_decodes_a_token_a_step():
    # 10 prompt tokens in one step (budget 64) give the first token at 1 s; the other 4 of
    # its 5 tokens take a step each: finished at 5 s, every gap between tokens 1 s
    t = run_engine(requests([0], [10], [5]), limits(), SecondPerStep())
    assert t.first_token_s[0] == 1.0 and t.finish_s[0] == 5.0
    assert list(t.itl.values()) == [1.0] * 4


def test_chunked_prefill_cuts_a_prompt_to_the_token_budget():
    # 10 prompt tokens with a budget of 4 a step: chunks of 4, 4 and 2, the first token at
    # the end of the third step (3 s)
    costs = SecondPerStep()
    t = run_engine(requests([0], [10], [2]), limits(max_num_batched_tokens=4), costs)
    assert t.first_token_s[0] == 3.0
    assert costs.steps[:3] == [(0, [(4, 0)]), (0, [(4, 4)]), (0, [(2, 8)])]
    # without chunking the prompt cannot run in 4-token steps: refused, never stalled
    whole = limits(max_num_batched_tokens=4, chunked_prefill=False)
    with pytest.raises(DlperfError, match="must fit one step"):
        run_engine(requests([0], [10], [2]), whole, SecondPerStep())


def test_decodes_and_a_new_prompt_share_a_step():
    # request 0 arrives at 0 and emits at 1 s; request 1 arrives at 0.5 s and joins the
    # second step beside request 0's decode: its first token at 2 s
    costs = SecondPerStep()
    t = run_engine(requests([0, 0.5], [8, 8], [3, 3]), limits(), costs)
    assert t.first_token_s.tolist() == [1.0, 2.0]
    assert costs.steps[1] == (1, [(8, 0)])  # one decode (8 cached) and request 1's prompt
    # without chunked prefill the new prompt runs alone first: request 0 waits a step
    costs = SecondPerStep()
    t = run_engine(requests([0, 0.5], [8, 8], [3, 3]), limits(chunked_prefill=False), costs)
    assert costs.steps[1] == (0, [(8, 0)])
    assert t.finish_s[0] == 4.0  # tokens at 1, 3 and 4 s


def test_async_scheduling_takes_a_request_that_arrives_mid_step_one_step_later():
    # vLLM's async scheduling: step 2 was scheduled when step 1 began (at 0 s), before
    # request 1 arrived (0.5 s); it joins step 3, scheduled at 1 s: its first token at 3 s,
    # not 2 s. Request 0's decodes run back to back as before: tokens at 1, 2, 3 s.
    costs = SecondPerStep()
    work = requests([0, 0.5], [8, 8], [3, 3])
    t = run_engine(work, limits(async_scheduling=True), costs)
    assert t.first_token_s.tolist() == [1.0, 3.0] and t.finish_s[0] == 3.0
    assert costs.steps[1] == (1, []) and costs.steps[2] == (1, [(8, 0)])
    # an idle engine schedules an arrival at once: alone, request 1 emits at 1.5 s
    t = run_engine(requests([0.5], [8], [3]), limits(async_scheduling=True), SecondPerStep())
    assert t.first_token_s.tolist() == [1.5]


def test_a_scheduler_policy_is_one_registered_function():
    """The extension point: a policy that admits the shortest waiting prompt
    first, registered by name and chosen in the engine's limits."""
    from dlperf.serving.scheduler import POLICIES, policy

    @policy("test-shortest-first")
    def shortest_first(engine):
        engine.waiting = type(engine.waiting)(
            sorted(engine.waiting, key=lambda r: int(engine.prompt[r]))
        )
        scheduled, budget = engine.continue_running(engine.limits.max_num_batched_tokens)
        return scheduled + engine.admit(budget, whole=False)

    try:
        # a 12-token prompt and a 2-token one arrive together, 4 tokens a step: first come
        # first served chunks the long one over steps 1-3 (4 + 4 + 4, its token at 3 s) and
        # the short one runs in step 4 (4 s); shortest first runs the short prompt and 2 of
        # the long one's in step 1 (the short one's token at 1 s), and the long one ends in
        # step 4: 2 + 4 + 4 + 2 = 12 (4 s)
        work = requests([0, 0], [12, 2], [1, 1])
        fcfs = run_engine(work, limits(max_num_batched_tokens=4), SecondPerStep())
        assert fcfs.first_token_s.tolist() == [3.0, 4.0]
        short = limits(max_num_batched_tokens=4, policy="test-shortest-first")
        mine = run_engine(work, short, SecondPerStep())
        assert mine.first_token_s.tolist() == [4.0, 1.0]
        with pytest.raises(DlperfError, match="unknown scheduler policy 'nope'"):
            run_engine(work, limits(policy="nope"), SecondPerStep())
    finally:
        POLICIES.pop("test-shortest-first")


def test_the_sequence_limit_makes_later_requests_wait():
    # 3 requests at once, 2 sequences at most: the third starts when the first two finish
    # (each 2 output tokens: at 1 s and 2 s), so its first token comes at 3 s
    t = run_engine(requests([0, 0, 0], [4, 4, 4], [2, 2, 2]), limits(max_num_seqs=2),
                   SecondPerStep())  # fmt: skip
    assert t.first_token_s.tolist() == [1.0, 1.0, 3.0]


def test_running_out_of_blocks_preempts_the_newest_and_recomputes_it():
    # blocks of 4 tokens, 5 in all. Two requests of 8 prompt tokens take 2 blocks each and
    # emit at 1 s; their 9th tokens need a third block each, and 1 is free: request 0 takes
    # it, request 1 (the newest) is preempted, its 2 blocks freed, and later recomputes its
    # 8 prompt tokens plus the 1 it emitted
    costs = SecondPerStep()
    t = run_engine(requests([0, 0], [8, 8], [4, 4]), limits(kv_blocks=5), costs)
    assert t.preemptions >= 1
    assert np.all(np.isfinite(t.finish_s))  # every request still finishes
    assert any(chunks == [(9, 0)] for _, chunks in costs.steps)  # the recompute
    with pytest.raises(DlperfError, match="needs 3 KV cache blocks"):
        run_engine(requests([0], [8], [4]), limits(kv_blocks=2), SecondPerStep())


def test_prefix_cache_hits_skip_whole_blocks_of_the_prompt():
    # half of a 16-token prompt is cached: 8 tokens (2 blocks of 4) are not computed again
    costs = SecondPerStep()
    run_engine(requests([0], [16], [2]), limits(prefix_cache_hit_rate=0.5), costs)
    assert costs.steps[0] == (0, [(8, 8)])


# -- workloads and SLOs ----------------------------------------------------------------------


def test_random_lengths_and_poisson_arrivals():
    fixed = workload("random:in=100,out=20", 50)
    assert set(fixed.input_len) == {100} and set(fixed.output_len) == {20}
    assert np.all(fixed.arrival_s == 0)  # no rate: all at once
    spread = workload("random:in=100,out=20,range=0.5", 2000, request_rate=4.0, seed=1)
    assert spread.input_len.min() >= 50 and spread.input_len.max() <= 150
    # exponential gaps of mean 1/4 s: over 1999 gaps the mean is within 10% of 0.25 s
    # (its standard error is 0.25 / sqrt(1999) = 2.2%)
    assert np.mean(np.diff(spread.arrival_s)) == pytest.approx(0.25, rel=0.1)


def test_jsonl_and_histogram_datasets(tmp_path):
    lines = tmp_path / "runs.jsonl"
    lines.write_text('{"input_len": 7, "output_len": 3, "arrival_s": 2.5}\n'
                     '{"prompt_len": 9, "output_tokens": 4, "arrival_s": 0.5}\n')  # fmt: skip
    w = workload(str(lines), 2)
    assert w.arrival_s.tolist() == [0.5, 2.5] and w.input_len.tolist() == [9, 7]
    hist = tmp_path / "lengths.json"
    doc = {
        "source": "made up for the test",
        "input_len": {"bins": [10, 20], "counts": [1]},
        "output_len": {"bins": [1, 2, 100], "counts": [1, 0]},
    }
    hist.write_text(json.dumps(doc))
    w = workload(str(hist), 100)
    assert w.input_len.min() >= 10 and w.input_len.max() < 20
    assert set(w.output_len) == {1}  # the only bin with a count


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ("sharegpt", "ships no ShareGPT lengths"),
        ("random:in=10", "give whole numbers"),
        ("random:in=10,out=5,range=2", "range in"),
        ("lengths.csv", "unknown --dataset"),
        ("missing.jsonl", "cannot read"),
    ],
)
def test_bad_datasets_are_one_line(dataset, message):
    with pytest.raises(DlperfError, match=message) as err:
        workload(dataset, 10)
    assert "\n" not in str(err.value)


def test_slo_units():
    slo = parse_slo("ttft=0.5s,tpot=50ms")
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == (0.5, 0.05, None)
    assert parse_slo("e2e=2000").e2e_s == 2.0  # bare numbers are ms, as vLLM's --goodput
    with pytest.raises(DlperfError, match="expected ttft=500ms"):
        parse_slo("latency=3s")


# -- a whole run --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulator():
    return Simulator(LLAMA, dataset="random:in=64,out=16", num_prompts=200, gpu="a100")


def test_far_below_capacity_a_request_sees_the_static_batch_of_one(simulator):
    # one request every 100 s never meets another: its first token comes after one prefill
    # of its 64 tokens (a grid point of the step table: the same traced step as serve's)
    # and each further token after one decode step at batch 1
    report = simulator.run(0.01)
    alone = serve(LLAMA, gpu="a100", input_len=64, output_len=16, batch=1)
    assert report.ttft["p50"] == pytest.approx(alone.ttft_s, rel=1e-9)
    # decode steps are interpolated between cache lengths 1 and 80: within 2% of serve's
    assert report.tpot["p50"] == pytest.approx(alone.tpot_s, rel=0.02)
    assert report.mean_batch == pytest.approx(1.0)


def test_a_burst_runs_in_waves_of_the_sequence_limit():
    # 40 requests at once, 8 sequences at most, nothing else binding (8 x 64 = 512 prompt
    # tokens fit the A100's 2048-token budget; the cache holds them all): 5 waves, each one
    # step of eight 64-token prompts, then 15 decode steps of 8 with 64 .. 78 cached
    sim = Simulator(LLAMA, dataset="random:in=64,out=16", num_prompts=40, gpu="a100",
                    max_num_seqs=8)  # fmt: skip
    report = sim.run(math.inf)
    c = sim.costs
    wave = c.step_s(0, 0.0, [(64, 0)] * 8) + sum(c.decode_s(8, 64 + j) for j in range(15))
    assert report.duration_s == pytest.approx(5 * wave, rel=1e-9)
    assert report.output_throughput == pytest.approx(40 * 16 / (5 * wave), rel=1e-9)
    # far above capacity (20 times the burst's request rate) the engine stays saturated:
    # the last request arrives 1/20 into the run; throughput within 10% of the burst's
    busy = sim.run(20 * report.request_throughput)
    assert busy.output_throughput == pytest.approx(report.output_throughput, rel=0.1)


def test_find_max_rate_meets_the_slo_just_below_it(simulator):
    slo = parse_slo("ttft=2ms")
    rate, report = simulator.find_max_rate(slo)
    assert report.ttft["p99"] <= 0.002 < simulator.run(math.inf).ttft["p99"]
    assert simulator.run(rate * 1.05, slo).ttft["p99"] > 0.002  # bisected to within 1/256
    assert report.goodput is not None and 0 < report.slo_attainment <= 1
    # an SLO that the whole queue at once meets has no largest rate
    assert simulator.find_max_rate(parse_slo("ttft=10s"))[0] == math.inf


def test_command_line_json_names_and_refusals(capsys):
    main(["serve", LLAMA, "--gpu", "a100", "--request-rate", "50", "--num-prompts", "40",
          "--dataset", "random:in=32,out=8", "--slo", "ttft=1s", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    for name in ("ttft", "tpot", "itl", "e2e"):
        assert set(doc[name]) >= {"mean", "median", "p50", "p90", "p99"}
    for key in ("request_throughput", "output_throughput", "input_throughput", "goodput"):
        assert doc[key] > 0
    for argv, message in (
        (["--request-rate", "5", "--batch", "4"], "--batch is for one static batch"),
        (["--max-num-seqs", "4"], "--max-num-seqs sets the simulated engine"),
        (["--find-max-rate"], "needs an --slo"),
    ):
        assert main(["serve", LLAMA, *argv]) == 2
        assert message in capsys.readouterr().err


def test_simulate_is_public():
    import dlperf

    report = dlperf.simulate(LLAMA, gpu="a100", dataset="random:in=16,out=4", num_prompts=5)
    assert report.completed == 5


def test_max_model_len_bounds_a_request_and_the_traced_sequence():
    """vLLM's --max-model-len: a request longer is refused; within the model's
    positions it sets the longest sequence a step is traced at."""
    with pytest.raises(DlperfError, match="longer than the engine's max_model_len 32"):
        Simulator(LLAMA, dataset="random:in=40,out=10", num_prompts=4, gpu="a100",
                  max_model_len=32)  # fmt: skip
    sim = Simulator(LLAMA, dataset="random:in=20,out=8", num_prompts=4, gpu="a100",
                    max_model_len=64)  # fmt: skip
    assert sim.d.context_tokens == 64 and sim.d.max_model_len == 64


def test_a_chunk_after_cached_tokens_is_priced_at_its_own_shape():
    """A prefill chunk of q new tokens after k cached runs one attention kernel
    over q queries and k + q keys: never a tiny prefill's per-pair cost scaled up."""
    from dlperf.serving.step_costs import chunk_shape

    costs = Simulator(LLAMA, dataset="random:in=500,out=8", num_prompts=2, gpu="h100",
                      precision="fp16").costs  # fmt: skip
    whole = costs._prefill_at(512)[1]  # the traced 512-token prompt's attention
    assert costs.chunk_attention_s(512, 0) == pytest.approx(whole, rel=1e-12)
    (shape, layers), = costs._calls  # 2 layers, one call each
    assert layers == 2
    chunk = chunk_shape(shape, 1, 127, "fp16")
    # 4 heads of 32 (q, k) + 32 (v): 2 x 4 x 1 query x 128 keys x 64 = 65,536 FLOPs of
    # unmasked scores; causal from the last key keeps 1 - 1 / (2 x 128) of them: 65,280
    assert (chunk.q_len, chunk.kv_len, chunk.causal) == (1, 128, True)
    assert chunk.flops == pytest.approx(65_280)
    # moved, fp16: q and the output, 4 heads x 64 elements x 2 bytes, and a 4-byte
    # log-sum-exp a head for the one query (528); k and v, 2 kv heads x 64 x 2 bytes,
    # for each of 128 keys (32,768): 33,296
    assert chunk.bytes == pytest.approx(33_296)
    # one token after 511 cached reads 512 keys once: less than the whole prompt's
    # attention (the old per-pair price made it 186x the whole prompt on an H100), and
    # more than one token alone
    one_after = costs.chunk_attention_s(1, 511)
    assert costs.chunk_attention_s(1, 0) < one_after < whole
    assert costs.chunk_attention_s(8, 504) < whole


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_a_long_cache_decode_is_the_short_traced_step_with_its_attention_repriced(cuda_graphs):
    """Only attention reads the cache: the long-cache decode derived from the
    short one's trace (its attention kernels priced again, the same issue
    timeline) is the long-cache decode traced, eager or in a CUDA graph."""
    costs = Simulator(LLAMA, dataset="random:in=200,out=8", num_prompts=2, gpu="h100",
                      precision="fp16", cuda_graphs=cuda_graphs).costs  # fmt: skip
    derived = costs._decode_at(4, costs.long)
    assert costs.traced == 1 and (4, costs.short) in costs._decode
    ((_, timing),), _ = costs.timeline.decode(4, [costs.long])
    assert derived == pytest.approx(timing["time_s"], rel=1e-9)
    assert derived > costs._decode_at(4, costs.short)


def test_a_shared_system_prompt_is_computed_once_per_group():
    """Requests of one group share a 10-token system prompt: once the first has
    computed it, the prefix cache holds its whole blocks (8 of 10 tokens, blocks of
    4) and the next request computes the rest of its prompt only."""
    work = Workload(
        np.array([0.0, 1.5, 1.5]), np.array([20, 20, 20]), np.array([2, 2, 2]), "test",
        group=np.array([0, 0, 1]), prefix_len=np.array([10, 10, 10]),
    )  # fmt: skip
    costs = SecondPerStep()
    run_engine(work, limits(), costs)
    # step 1 (0-1 s): request 0's whole prompt; step 2 (1-2 s): request 0's decode, and
    # nothing else yet (requests 1 and 2 arrive at 1.5 s); step 3: request 1 finds its
    # group's 8 cached tokens and computes 12, request 2 (another group) all 20
    assert costs.steps[0] == (0, [(20, 0)])
    assert costs.steps[2] == (0, [(12, 8), (20, 0)])


def test_stages_send_rate_x_seconds_requests_each_within_its_stage():
    from dlperf.serving.workload import gathered, parse_stages
    from dlperf.serving.workload import requests as drawn

    stages = parse_stages("8x0.5,2x1")
    assert stages == [(8.0, 0.5), (2.0, 1.0)]
    # 8 x 0.5 = 4 requests, then 2 x 1 = 2
    work = gathered(drawn("random:in=8,out=2", 6, seed=1).staged(stages))
    first, second = work.arrival_s[work.stage == 0], work.arrival_s[work.stage == 1]
    assert len(first) == 4 and len(second) == 2
    # gaps rescaled to fill each stage: its last request comes at the stage's end
    assert first.min() > 0 and first.max() == pytest.approx(0.5)
    assert second.min() > 0.5 and second.max() == pytest.approx(1.5)
    for bad in ("8x", "0x10", "ax1", "0.1x1"):
        with pytest.raises(DlperfError, match="--stages"):
            parse_stages(bad)


def test_a_staged_shared_prefix_run_reports_each_stage_and_its_saturation():
    from dlperf.serving.simulate import simulate

    shared = "shared-prefix:system=32,question=16,output=4,groups=2,users=2"
    report = simulate(LLAMA, gpu="a100", cuda_graphs=True, stages="4x1,8x1", dataset=shared)
    assert [s["num_prompts"] for s in report.stages] == [4, 8]
    assert report.num_prompts == 12 and report.completed == 12
    assert report.sustainable_rate > 0 and report.saturated == (report.sustainable_rate < 8)
    doc = report.to_dict()
    assert doc["stages"][1]["request_rate"] == 8 and doc["stages"][1]["e2e"]["p99"] > 0
    with pytest.raises(DlperfError, match="--stages or --request-rate"):
        simulate(LLAMA, gpu="a100", stages="4x1", request_rate=3.0)


def test_a_malformed_slo_names_the_part_it_could_not_read():
    for text in ("ttft=", "ttft=abc", "foo=5ms"):
        with pytest.raises(DlperfError, match=f"not {text!r}"):
            parse_slo(text)


def test_a_file_of_timestamps_sends_its_requests_at_them(tmp_path, capsys):
    """issue 36, items 6 and 8: with --num-prompts left at its default (1000) a
    trace of 3 timed requests was refused as if arrival_s were missing."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"input_len": 8, "output_len": 2, "arrival_s": t}) + "\n" for t in (0, 1, 2)
    ))  # fmt: skip
    model = "hf:gpt2:layers=1,hidden=64,heads=2,vocab=128,positions=64"
    assert main(["serve", model, "--dataset", str(trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # 3 requests 1 s apart: 2 gaps over 2 s, 1 request/s
    assert doc["num_prompts"] == 3 and doc["request_rate"] == pytest.approx(1.0)
    assert any("arrival_s" in note for note in doc["notes"])


def test_token_gaps_fold_into_bins_past_their_exact_budget(monkeypatch):
    """Past `EXACT` gaps the run keeps counts over bins 0.5% wide: its memory stops
    growing, the mean stays exact and a percentile lands within a bin of numpy's."""
    from dlperf.serving.latencies import Samples

    monkeypatch.setattr(Samples, "EXACT", 1000)
    gaps, values = Samples(), np.random.default_rng(0).lognormal(-4.0, 0.5, 5000)
    for part in np.split(values, 10):
        gaps.add(part)
    assert gaps.values() is None and gaps.counts.size == 460 * 14 + 1
    stats = gaps.stats((50, 90, 99))
    assert stats["mean"] == pytest.approx(values.mean(), rel=1e-12)
    for q in (50, 90, 99):
        assert stats[f"p{q}"] == pytest.approx(np.percentile(values, q), rel=0.006)


class TenMsPerStep:
    """Every step takes 10 ms and nothing is kept of it."""

    def step_s(self, decodes, decode_cached, chunks):
        return 0.01

    def decode_s(self, batch, mean_cached):
        return 0.01


def test_requests_stream_through_the_engine_in_memory_that_does_not_grow(monkeypatch):
    """issue 36, item 1: a run held every request's state to the end, so 10^7 took
    1.2 GB. Requests are now drawn a chunk at a time and held only while queued
    (a window of them) or running, and latencies fold into bins past `EXACT`:
    4x the requests, sent all at once (the longest queue), need no more memory."""
    import tracemalloc

    from dlperf.serving import workload as drawing
    from dlperf.serving.latencies import Latencies, Samples

    monkeypatch.setattr(drawing, "CHUNK", 1000)
    monkeypatch.setattr(Samples, "EXACT", 1000)

    def peak_bytes(n: int) -> tuple[int, Latencies]:
        stream = drawing.requests("random:in=8,out=2", n).arriving(math.inf)
        done = Latencies()
        tracemalloc.start()
        run_engine(stream, limits(max_num_seqs=256, kv_blocks=10**6), TenMsPerStep(), done)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak, done

    small, done = peak_bytes(5_000)
    assert done.count == 5_000 and done.output_tokens == 10_000
    large, done = peak_bytes(20_000)
    assert done.count == 20_000
    # held whole, 4x the requests took 4x the memory; streamed, the window of 1024
    # queued requests and one chunk of 1000 are the same for both
    assert large < 1.25 * small


def test_async_scheduling_runs_many_decode_steps_at_once_as_one_at_a_time(monkeypatch):
    # the fast path (`_fast_forward`) runs, under async scheduling, the decode steps
    # begun before the next arrival and the one after, scheduled before it came: the
    # same times as stepping one at a time
    from dlperf.serving import scheduler

    class Costs(SecondPerStep):
        def step_s(self, decodes, decode_cached, chunks):
            return 0.01 + 0.001 * decodes + 1e-5 * sum(new for new, _ in chunks)

        def decode_s(self, batch, mean_cached):
            return 0.01 + 0.001 * batch

    rng = np.random.default_rng(0)
    work = requests(np.cumsum(rng.exponential(0.05, 200)), rng.integers(4, 40, 200),
                    rng.integers(2, 30, 200))  # fmt: skip
    fast = run_engine(work, limits(async_scheduling=True), Costs())
    monkeypatch.setattr(scheduler.EngineState, "_fast_forward", lambda self, ahead: False)
    slow = run_engine(work, limits(async_scheduling=True), Costs())
    assert np.allclose(fast.first_token_s, slow.first_token_s, rtol=0, atol=1e-9)
    assert np.allclose(fast.finish_s, slow.finish_s, rtol=0, atol=1e-9)
