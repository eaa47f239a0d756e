"""Advice: each rule fires on a model built to break it, not on one that
follows the guides; automatic fixes keep the outputs."""

import pytest
import torch
from torch import nn

import dlperf
from dlperf.advice import engine, fixes
from dlperf.cli import main
from dlperf.errors import DlperfError

from .test_analyze import TinyTransformer


def rules_fired(model, x, gpu="a100", precision="amp-fp16", training=True, rules=None):
    advice = dlperf.advise(model, x, gpu=gpu, precision=precision, training=training, rules=rules)
    return {f.rule: f for f in advice.findings}


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_fp32_on_tensor_core_gpu():
    found = rules_fired(
        nn.Linear(4096, 4096), meta(4096, 4096), precision="fp32", rules=["tensor-core-precision"]
    )
    f = found["tensor-core-precision"]
    assert f.gain_time_s > 0 and "amp-bf16" in f.fix and "TF32" in f.fix
    assert not rules_fired(
        nn.Linear(4096, 4096),
        meta(4096, 4096),
        precision="amp-bf16",
        rules=["tensor-core-precision"],
    )


class TinyLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, 256)
        self.head = nn.Linear(256, vocab)

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_gpt2_vocabulary_is_padded_to_a_multiple_of_64():
    ids = meta(8, 128, dtype=torch.long)
    found = rules_fired(TinyLM(50257), ids, rules=["pad-vocabulary"])
    f = found["pad-vocabulary"]
    assert f.gain_time_s > 0
    assert f.evidence["head"]["padded"] == 50304  # 64 * 786, the next multiple of 64
    assert not rules_fired(TinyLM(50304), ids, rules=["pad-vocabulary"])


def test_linear_alignment():
    # 4001 misses the 8-element rule of fp16 Tensor Cores; padded to 4032 (63 x 64). Only
    # N and K count: the forward (N = 4001) pays, the weight gradient (M = 4001) does not
    found = rules_fired(nn.Linear(4096, 4001), meta(4096, 4096), rules=["align-linear"])
    assert found["align-linear"].evidence[""]["padded"] == 4032
    assert not rules_fired(nn.Linear(4096, 4096), meta(4096, 4096), rules=["align-linear"])


def conv_net(channels_in=3, bias=False):
    return nn.Sequential(
        nn.Conv2d(channels_in, 64, 7, stride=2, padding=3, bias=bias),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
    )


def test_channels_last():
    x = meta(32, 3, 112, 112)
    assert "channels-last" in rules_fired(conv_net(), x, rules=["channels-last"])
    model, x_last = fixes.channels_last(conv_net(), x)
    assert not rules_fired(model, x_last, rules=["channels-last"])
    # plain fp32 runs on CUDA cores: NCHW data is not transposed, nothing to gain
    assert not rules_fired(conv_net(), x, precision="fp32", rules=["channels-last"])


def test_first_conv_channels():
    found = rules_fired(conv_net(3), meta(32, 3, 112, 112), rules=["first-conv-channels"])
    assert found["first-conv-channels"].evidence == {"in_channels": 3, "padded": 4}
    assert not rules_fired(conv_net(8), meta(32, 8, 112, 112), rules=["first-conv-channels"])


def test_conv_bias_before_batch_norm():
    x = meta(8, 3, 64, 64)
    f = rules_fired(conv_net(bias=True), x, rules=["conv-bias-before-bn"])["conv-bias-before-bn"]
    assert f.modules == ["0"] and f.evidence["bias_parameters"] == 64
    assert not rules_fired(conv_net(bias=False), x, rules=["conv-bias-before-bn"])


class SeparateQKV(nn.Module):
    def __init__(self, d=512, out=None):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, out or d) for _ in range(3))

    def forward(self, x):
        return self.q_proj(x) + self.k_proj(x) * self.v_proj(x)


def test_fuse_qkv():
    assert "fuse-qkv" in rules_fired(SeparateQKV(), meta(64, 512), rules=["fuse-qkv"])
    assert not rules_fired(nn.Linear(512, 1536), meta(64, 512), rules=["fuse-qkv"])


def test_fused_attention():
    ids = meta(4, 512, dtype=torch.long)
    assert "fused-attention" in rules_fired(TinyTransformer(), ids, rules=["fused-attention"])

    class Fused(nn.Module):
        def forward(self, q):
            return nn.functional.scaled_dot_product_attention(q, q, q)

    assert not rules_fired(Fused(), meta(4, 8, 512, 64), training=False, rules=["fused-attention"])


class Scaled(nn.Module):
    """Point-wise ops in the root module's own forward (module path "")."""

    def forward(self, x):
        return (x * 2 + 1).relu()


def test_a_finding_names_the_root_module():
    # issue 36, item 14: the latency-bound list started with an empty module name
    found = rules_fired(Scaled(), meta(2, 64), training=False, rules=["latency-bound"])
    modules = found["latency-bound"].modules
    assert "" not in modules and "(model)" in modules


def test_latency_and_small_batch():
    found = rules_fired(
        nn.Sequential(nn.Linear(64, 64), nn.ReLU()), meta(2, 64), rules=["latency-bound"]
    )
    assert "latency-bound" in found
    # pure fp16: no per-step weight casts, the GEMM is the step
    found = rules_fired(
        nn.Linear(4096, 4096),
        meta(8, 4096),
        precision="fp16",
        training=False,
        rules=["small-batch"],
    )
    assert found["small-batch"].gain_time_s > 0


def test_memory_bound_share():
    model = nn.Sequential(nn.Linear(256, 256), *[nn.GELU() for _ in range(8)])
    assert "memory-bound-share" in rules_fired(model, meta(4096, 256), rules=["memory-bound-share"])


def test_lstm_hidden_1000_in_fp16_is_told_1024():
    lstm = nn.LSTM(512, 1000)
    found = rules_fired(lstm, meta(32, 64, 512), precision="fp16", rules=["rnn-sizes"])
    assert "hidden size 1000 -> 1024" in found["rnn-sizes"].fix
    assert "persistent" in found["rnn-sizes"].fix
    assert not rules_fired(
        nn.LSTM(512, 1024), meta(32, 64, 512), precision="fp16", rules=["rnn-sizes"]
    )


def test_memory_fit_and_settings():
    big = nn.Sequential(*[nn.Linear(8192, 8192) for _ in range(20)])  # 1.3 B parameters
    found = rules_fired(big, meta(8, 8192), gpu="t4", rules=["memory-fit"])
    assert found["memory-fit"].gain_memory_bytes > 0
    found = rules_fired(nn.Linear(64, 64), meta(8, 64), rules=["precision-settings"])
    assert "GradScaler" in found["precision-settings"].fix


def test_a_model_that_follows_the_guides_triggers_nothing():
    good = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))
    advice = dlperf.advise(good, meta(2048, 1024), gpu="a100", precision="amp-bf16")
    # only the what-if that changes outputs (2:4 pruning, advice without a fix)
    assert [f.rule for f in advice.findings] == ["sparsity-2-4"]
    assert advice.predicted_time_after_s == advice.predicted_time_s


def test_advice_document_and_totals():
    advice = dlperf.advise(
        TinyLM(50257), meta(8, 128, dtype=torch.long), gpu="a100", precision="amp-fp16"
    )
    doc = advice.to_dict()
    assert doc["predicted_time_after_s"] < doc["predicted_time_s"]
    for key in (
        "rule",
        "severity",
        "modules",
        "evidence",
        "fix",
        "gain_time_s",
        "gain_fraction",
        "gain_memory_bytes",
    ):
        assert key in doc["findings"][0]
    gains = [f["gain_time_s"] for f in doc["findings"]]
    assert gains == sorted(gains, reverse=True)


# -- automatic fixes keep the outputs (real CPU tensors) ----------------------------


def test_padded_linear_is_exact():
    torch.manual_seed(0)
    model = TinyLM(1000)
    ids = torch.randint(0, 1000, (2, 16))
    fixed = fixes.pad_linear_outputs(model, {"head": 1024})
    assert torch.equal(fixed(ids), model(ids))
    assert fixed.head.weight.shape == (1024, 256)


def test_channels_last_and_first_conv_padding_keep_outputs():
    torch.manual_seed(0)
    model = conv_net(3).eval()
    x = torch.randn(2, 3, 32, 32)
    last, x_last = fixes.channels_last(model, x)
    torch.testing.assert_close(last(x_last), model(x))
    padded = fixes.pad_first_conv(model, "0", 8)
    torch.testing.assert_close(padded(x), model(x))


def test_fused_qkv_keeps_outputs():
    torch.manual_seed(0)
    model = SeparateQKV(64)
    x = torch.randn(4, 64)
    torch.testing.assert_close(fixes.fuse_qkv(model)(x), model(x))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_dropping_conv_bias_before_bn_keeps_outputs(mode):
    torch.manual_seed(0)
    model = conv_net(3, bias=True)
    model(torch.randn(4, 3, 16, 16))  # non-trivial running statistics
    getattr(model, mode)()
    x = torch.randn(4, 3, 16, 16)
    fixed = getattr(fixes.drop_conv_bias(model, [("0", "1")]), mode)()
    assert fixed[0].bias is None
    torch.testing.assert_close(fixed(x), model(x), rtol=1e-4, atol=1e-5)


def test_dlperf_fix_keeps_weights_and_outputs():
    torch.manual_seed(0)
    model = nn.Sequential(conv_net(3, bias=True), nn.Flatten(), nn.Linear(64 * 16 * 16, 1000))
    x = torch.randn(2, 3, 32, 32)
    model.eval()
    expected = model(x)
    fixed = dlperf.fix(model, x, gpu="a100", precision="fp32").eval()
    torch.testing.assert_close(fixed(x), expected, rtol=1e-4, atol=1e-5)
    assert model[0][0].bias is not None  # the user's model is untouched


def test_cli_advise(capsys):
    assert main(["advise", "--list-rules"]) == 0
    assert "pad-vocabulary" in capsys.readouterr().out
    assert (
        main(
            [
                "advise",
                "torchvision:resnet18",
                "--gpu",
                "a100",
                "--precision",
                "amp-fp16",
                "--batch",
                "8",
                "--apply",
                "channels-last",
            ]
        )
        == 0
    )
    assert "channels-last" in capsys.readouterr().out
    with pytest.raises(DlperfError, match="unknown rule"):
        dlperf.advise(nn.Linear(2, 2), meta(1, 2), rules=["nope"])


def test_early_layers_and_relu_fusion():
    early = nn.Sequential(
        nn.Conv2d(64, 64, 3, padding=1, groups=64),
        nn.BatchNorm2d(64),
        nn.SiLU(),
        nn.Conv2d(64, 64, 3, padding=1, groups=64),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 64, 1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
    )
    found = rules_fired(early, meta(32, 64, 112, 112), rules=["early-layers", "relu-fusion"])
    assert found["early-layers"].evidence["kind"] == "depthwise convolution"
    assert found["relu-fusion"].evidence["activations"] == ["SiLU"]
    dense = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
    assert not rules_fired(dense, meta(32, 32, 56, 56), rules=["early-layers", "relu-fusion"])


def test_rules_and_findings_name_the_guides_not_seed_files(capsys):
    from dlperf.advice import load_rules

    for r in load_rules().values():
        assert r.source.startswith("NVIDIA"), r.id
        assert "seed" not in f"{r.title} {r.source}".lower(), r.id
    assert main(["advise", "--list-rules", "--json"]) == 0
    out = capsys.readouterr().out
    assert "seed" not in out.lower() and "Optimizing Recurrent Layers" in out
    # a model that trips rules whose text cites a figure or section
    model = nn.Sequential(nn.Conv2d(3, 30, 3, bias=True), nn.BatchNorm2d(30), nn.Flatten())
    advice = dlperf.advise(model, meta(8, 3, 32, 32), gpu="a100", precision="fp32")
    assert advice.findings
    assert "seed" not in str(advice.to_dict()).lower()


def count_traces(monkeypatch) -> list:
    """The models the session traces from now on (one entry per whole trace)."""
    import dlperf.run

    traced, real = [], dlperf.run.trace
    monkeypatch.setattr(
        dlperf.run, "trace", lambda m, *a, **k: traced.append(m) or real(m, *a, **k)
    )
    return traced


def test_apply_applies_the_fix_its_rule_priced(monkeypatch):
    x = meta(8, 3, 64, 64)
    gain = rules_fired(conv_net(), x, rules=["channels-last"])["channels-last"].gain_time_s
    traced = count_traces(monkeypatch)
    done = engine.apply(conv_net(), "channels-last", x, gpu="a100", precision="amp-fp16")
    assert done.applied == ["channels-last"]
    assert done.predicted_time_s - done.predicted_time_after_s == pytest.approx(gain, rel=1e-9)
    # the model as given, and in NHWC: the rule's priced model is the one applied, not re-traced
    assert len(traced) == 2
    assert set(done.to_dict()) == {"applied", "predicted_time_s", "predicted_time_after_s"}


def test_first_conv_and_channels_last_share_the_nhwc_trace(monkeypatch):
    traced = count_traces(monkeypatch)
    found = rules_fired(
        conv_net(3), meta(8, 3, 64, 64), rules=["channels-last", "first-conv-channels"]
    )
    assert set(found) == {"channels-last", "first-conv-channels"}
    # as given, in NHWC (both rules), and with the fourth channel in NHWC
    assert len(traced) == 3


def test_apply_refuses_a_rule_without_an_automatic_fix(monkeypatch):
    traced = count_traces(monkeypatch)
    with pytest.raises(DlperfError, match="no automatic fix"):
        engine.apply(nn.Linear(64, 64), "latency-bound", meta(2, 64))
    assert traced == []  # refused before anything is traced


def test_fixes_compose_when_they_touch_the_same_layers():
    # 1001 outputs miss the alignment and Q, K, V are separate: fusing them gains more,
    # so it comes first and the padding leaves the fused layers alone. The input needs a
    # gradient, as an inner layer's does: the forward (N = 1001) and the data gradient
    # (K = 1001) miss the alignment; the weight gradient's M = 1001 does not count
    model, x = SeparateQKV(1024, out=1001), meta(1024, 1024).requires_grad_()
    advice = dlperf.advise(model, x, gpu="a100", precision="amp-fp16")
    gains = {f.rule: f.gain_time_s for f in advice.findings}
    assert gains["fuse-qkv"] > gains["align-linear"] > 0
    assert advice.predicted_time_after_s < advice.predicted_time_s
    both = engine.apply(model, "fuse-qkv,align-linear", x, gpu="a100", precision="amp-fp16")
    fused = engine.apply(model, "fuse-qkv", x, gpu="a100", precision="amp-fp16")
    assert both.applied == ["align-linear", "fuse-qkv"]
    assert both.predicted_time_after_s == fused.predicted_time_after_s


def test_memory_bound_share_is_priced_by_compiling_the_step():
    # the rule's gain is the step analysed as torch.compile runs it, less the step eager
    model = nn.Sequential(
        *(nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.LayerNorm(256)) for _ in range(4))
    )
    x = meta(4096, 256)
    found = rules_fired(model, x, rules=["memory-bound-share"])["memory-bound-share"]
    eager = dlperf.analyze(model, x, gpu="a100", precision="amp-fp16")
    compiled = dlperf.analyze(model, x, gpu="a100", precision="amp-fp16", compile=True)
    assert found.gain_time_s == pytest.approx(eager.step_time_s - compiled.step_time_s)
    assert found.evidence["kernels_after"] < found.evidence["kernels_before"]
