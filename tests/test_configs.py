"""--config FILE and explain-config (configs/): each shipped example becomes
the run derived here field by field; unknown fields are listed; a malformed
file is one line naming where. Models by hub id (models/hub.py)."""

import json
from pathlib import Path

import pytest

import dlperf
from dlperf import configs
from dlperf.cli import main
from dlperf.configs import read_config
from dlperf.errors import DlperfError

EXAMPLES = Path(__file__).parents[1] / "examples"
# each format's example: a format added to configs.FORMATS needs one here
EXAMPLE_OF = {
    "torchtitan": "torchtitan_llama3_8b.toml",
    "llm-foundry": "llm_foundry_mpt_125m.yaml",
    "megatron": "megatron_gpt_1.3b.sh",
    "hf-training": "hf_training_args.json",
    "hf-config": "tiny_llama_config.json",
    "vllm": "vllm_llama3_8b.sh",
}


def test_torchtitan_llama3_8b_becomes_fsdp_with_per_op_checkpointing():
    job = read_config(EXAMPLES / "torchtitan_llama3_8b.toml", gpus=8)
    assert job.format == "torchtitan"
    assert job.model == "hf:meta-llama/Llama-3.1-8B"  # [model] llama3 / 8B
    assert job.micro_batch == 1  # [training] local_batch_size
    assert job.options["seq_len"] == 8192
    assert job.options["precision"] == "amp-bf16"  # mixed_precision_param bfloat16
    assert job.options["reduce_dtype"] == "fp32"  # mixed_precision_reduce float32
    assert job.options["checkpoint"] == "selective-op"  # selective, option "op"
    assert job.options["optimizer"] == "adamw"
    # data_parallel_shard_degree -1 on 8 GPUs with every other degree 1: FSDP over 8
    assert job.parallel == {"tp": 1, "pp": 1, "cp": 1, "dp": 8, "sharding": "fsdp"}
    assert job.global_batch == 8  # global_batch_size left at -1: 1 per rank, no accumulation
    assert job.unknown == []
    ignored = {f.name for f in job.fields if f.ignored}
    assert {"optimizer.lr", "job.dump_folder"} <= ignored
    assert job.options["clip_grad"]  # max_norm 1.0: clip_grad_norm_ every step


def test_llm_foundry_mpt_125m_becomes_pure_bf16_fsdp_with_the_fused_loss():
    job = read_config(EXAMPLES / "llm_foundry_mpt_125m.yaml", gpus=8)
    assert job.format == "llm-foundry"
    # GPT-2's blocks sized as MPT: d_model 768, 12 layers, 12 heads, 4 x 768, vocab 50368
    assert job.model.startswith("hf:gpt2:n_embd=768,n_layer=12,n_head=12,n_inner=3072,")
    assert "vocab_size=50368,n_positions=2048" in job.model  # ${variables.max_seq_len}
    assert (job.micro_batch, job.global_batch) == (26, 208)
    # precision amp_bf16 under FSDP's PURE: bf16 parameters, reduced in bf16
    assert job.options["precision"] == "bf16" and job.options["reduce_dtype"] == "bf16"
    assert job.options["loss"] == "fused"  # ComposerMPTCausalLM's default loss_fn
    assert job.options["attention"] == "auto"  # attn_impl flash
    assert job.options["checkpoint"] == "none"
    assert "clip_grad" not in job.options  # no algorithms.gradient_clipping: Composer clips not
    assert job.parallel == {"sharding": "fsdp", "tp": 1, "pp": 1, "dp": 8}
    assert job.unknown == []


def test_megatron_arguments_become_tp2_sequence_parallel_zero1():
    job = read_config(EXAMPLES / "megatron_gpt_1.3b.sh", gpus=8)
    assert job.format == "megatron"
    # no --swiglu: GPT with a 4 x hidden GELU MLP and GPT-2's padded vocabulary
    assert job.model.startswith("hf:gpt2:n_embd=2048,n_layer=24,n_head=16,n_inner=8192,")
    assert (job.micro_batch, job.global_batch) == (4, 256)
    assert job.options["precision"] == "amp-bf16"
    assert job.options["attention"] == "flash"  # --use-flash-attn: flash-attn 2 (issue 36, 7)
    assert (job.gpus, job.gpus_per_node) == (8, 8)  # torchrun --nproc_per_node 8
    assert job.options["checkpoint"] == "selective"  # --recompute-granularity selective
    assert job.options["clip_grad"]  # --clip-grad 1.0
    # 8 GPUs / tp 2 = dp 4; the distributed optimizer shards the states (ZeRO-1)
    assert job.parallel == {
        "tp": 2,
        "pp": 1,
        "cp": 1,
        "sharding": "zero1",
        "sequence_parallel": True,
        "dp": 4,
    }
    assert job.unknown == []


def test_training_arguments_json_become_micro_batches_for_memory():
    job = read_config(EXAMPLES / "hf_training_args.json")
    assert (job.micro_batch, job.grad_accum) == (4, 4)
    # no max_grad_norm: the Trainer's default 1.0 clips every step
    assert job.options == {
        "checkpoint": "full", "precision": "amp-fp16", "optimizer": "adamw", "clip_grad": True
    }  # fmt: skip
    # dlperf memory takes the whole batch and splits it: 4 x 4 in 4 micro-batches
    assert job.cli_values("memory") | {} == {
        "checkpoint": "full",
        "precision": "amp-fp16",
        "optimizer": "adamw",
        "clip_grad": True,
        "batch": 16,
        "accumulate": 4,
    }
    assert job.cli_values("analyze")["batch"] == 4  # one micro-batch's step


def test_vllm_arguments_become_the_serving_engine():
    job = read_config(EXAMPLES / "vllm_llama3_8b.sh")
    assert job.model == "hf:meta-llama/Llama-3.1-8B"
    assert job.serving == {
        "tp": 1,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "gpu_memory_utilization": 0.9,
        "precision": "bf16",  # --dtype bfloat16
    }
    assert [f.name for f in job.fields if f.ignored] == ["--port"]


def test_a_model_config_json_builds_the_model_it_describes():
    path = EXAMPLES / "tiny_llama_config.json"
    job = read_config(path)
    assert job.model == f"hf:{path}"
    a = dlperf.analyze(job.model, gpu="a100", batch=1, seq_len=64, precision="amp-bf16")
    # per layer: q and o 512 x 512, k and v 512 x 256 (4 kv heads of 64), the
    # SwiGLU MLP 3 x 512 x 1536, two norms of 512; 4 layers; embedding and an
    # untied head of 32000 x 512; the final norm
    layer = 2 * 512 * 512 + 2 * 512 * 256 + 3 * 512 * 1536 + 2 * 512
    assert a.params == 4 * layer + 2 * 32000 * 512 + 512


def test_unknown_fields_are_listed_never_dropped(tmp_path):
    text = (EXAMPLES / "torchtitan_llama3_8b.toml").read_text()
    path = tmp_path / "job.toml"
    path.write_text(text.replace("seq_len = 8192", "seq_len = 8192\nturbo = true"))
    job = read_config(path)
    assert [f.name for f in job.unknown] == ["training.turbo"]


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("job.toml", "[model\nname = 1", "malformed TOML"),
        ("run.yaml", "model:\n  name: mpt\n    d_model: 1\n", "line 3: malformed YAML"),
        ("args.json", '{"per_device_train_batch_size": 4,\n}', "line 2"),
        (
            "job.toml",
            '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = "x"\n',
            "training.local_batch_size: expected a positive whole number",
        ),
        ("job.toml", '[model]\nname = "gpt5"\nflavor = "1T"\n[training]\n', "no dlperf model"),
        ("notes.txt", "hello", "not a config dlperf reads"),
    ],
)
def test_a_malformed_config_is_one_line_naming_where(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DlperfError, match=says) as err:
        read_config(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_flags_beside_config_win(capsys):
    config = str(EXAMPLES / "torchtitan_llama3_8b.toml")
    argv = ["plan", "--config", config, "--gpu", "h100", "--checkpoint", "full", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "hf:meta-llama/Llama-3.1-8B"
    assert doc["fixed"]["checkpoint"] == "full"  # the flag, not the file's selective-op
    assert doc["fixed"]["sharding"] == "fsdp" and doc["fixed"]["dp"] == 8  # the file's
    assert doc["global_batch"] == 8
    # --gpus beside it resolves the file's data_parallel_shard_degree = -1
    assert main([*argv, "--gpus", "16"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fixed"]["dp"] == 16 and doc["global_batch"] == 16


def test_explain_config_and_models_print_json(capsys):
    assert main(["explain-config", str(EXAMPLES / "megatron_gpt_1.3b.sh"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "megatron" and doc["unknown"] == []
    became = {f["field"]: f.get("became") for f in doc["fields"]}
    assert became["--recompute-granularity"] == "--checkpoint selective"
    assert main(["models", "--json"]) == 0
    models = {m["id"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    llama = models["hf:meta-llama/Llama-3.1-8B"]
    assert llama["source"].startswith("https://huggingface.co/meta-llama/Llama-3.1-8B")
    assert (llama["layers"], llama["hidden"]) == (32, 4096)


def test_a_missing_hub_id_names_the_nearest_and_the_way_out():
    with pytest.raises(DlperfError, match="nearest: meta-llama/Llama-3.1-8B") as err:
        dlperf.analyze("hf:meta-llama/Llama-3.1-8b", batch=1, seq_len=16)
    assert "hf:path/to/config.json" in str(err.value)


def test_no_model_and_no_config_is_one_line(capsys):
    assert main(["analyze", "--gpu", "h100"]) == 2
    assert "name a MODEL" in capsys.readouterr().err


def test_a_config_without_a_model_asks_for_one(capsys):
    config = str(EXAMPLES / "hf_training_args.json")
    assert main(["memory", "--config", config]) == 2
    assert "names no model (a hf-training config): give MODEL" in capsys.readouterr().err


def test_each_framework_says_whether_it_clips_the_gradients(tmp_path):
    yaml = (EXAMPLES / "llm_foundry_mpt_125m.yaml").read_text()
    clipped = tmp_path / "mpt.yaml"
    clipped.write_text(yaml + "algorithms:\n  gradient_clipping:\n    clipping_threshold: 1.0\n")
    assert read_config(clipped, gpus=8).options["clip_grad"]
    script = (EXAMPLES / "megatron_gpt_1.3b.sh").read_text()
    off = tmp_path / "megatron.sh"
    off.write_text(script.replace("--clip-grad 1.0", "--clip-grad 0.0"))
    assert read_config(off, gpus=8).options["clip_grad"] is False
    # Megatron-LM clips at 1.0 when the flag is absent
    absent = tmp_path / "megatron_default.sh"
    absent.write_text(script.replace("--clip-grad 1.0", ""))
    assert read_config(absent, gpus=8).options["clip_grad"] is True


def test_an_inference_pass_ignores_a_configs_clipping(capsys):
    # the Trainer's JSON clips (its default max_grad_norm); --infer has no gradients
    base = ["analyze", "hf:gpt2:layers=1,n_embd=64,n_head=2", "--gpu", "a100", "--json",
            "--config", str(EXAMPLES / "hf_training_args.json")]  # fmt: skip
    assert main([*base, "--infer"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # and --no-clip-grad turns it off for a training step
    assert main([*base, "--no-clip-grad"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not [r for r in doc["ops"] if r["op"] == "clip_grad_norm"]
    assert main([*base]) == 0  # the config alone clips
    assert [r for r in json.loads(capsys.readouterr().out)["ops"] if r["op"] == "clip_grad_norm"]


def test_every_config_example_is_one_formats_example():
    written = {p.name for p in EXAMPLES.iterdir() if p.suffix in (".toml", ".yaml", ".sh", ".json")}
    assert written == set(EXAMPLE_OF.values())
    assert sorted(fmt.name for fmt in configs.FORMATS) == sorted(EXAMPLE_OF)


@pytest.mark.parametrize("fmt", configs.FORMATS, ids=lambda fmt: fmt.name)
def test_each_formats_entry_reads_its_example(fmt):
    path = EXAMPLES / EXAMPLE_OF[fmt.name]
    assert configs.SUFFIXES.get(path.suffix, "text") == fmt.syntax
    doc = configs.parse(path.read_text(), fmt.syntax, str(path))
    assert fmt.looks_like(doc)
    job = fmt.read(doc, str(path), 8)
    assert job.format == fmt.name and job.fields and not job.unknown
    # the dispatch picks this entry and no earlier one of the same syntax
    assert read_config(path, gpus=8).to_dict() == job.to_dict()


def test_a_new_format_is_one_table_entry(tmp_path, monkeypatch):
    """A worked extension: plain text, `# toy` then `compile = yes` lines."""

    def looks_like(text: str) -> bool:
        return text.startswith("# toy")

    def read(text: str, path: str, gpus: int | None) -> configs.Job:
        job = configs.Job("toy", path)
        for line in text.splitlines()[1:]:
            key, value = (word.strip() for word in line.split("="))
            job.options["compile"] = value == "yes"
            job.use(key, value, "--compile")
        return job

    toy = configs.Format("toy", "text", looks_like, read)
    monkeypatch.setattr(configs, "FORMATS", (*configs.FORMATS, toy))
    path = tmp_path / "run.cfg"
    path.write_text("# toy\ncompile = yes\n")
    job = read_config(path)
    assert job.format == "toy" and job.options == {"compile": True}


def test_torchtitans_float8_converter_prices_float8(tmp_path, capsys):
    # issue 36, item 7: `[model] converters = ["float8"]` with a [float8] section was priced
    # in bf16, and explain-config called the converters "where weights and tokenizer live"
    text = (EXAMPLES / "torchtitan_llama3_8b.toml").read_text()
    text = text.replace('flavor = "8B"', 'flavor = "8B"\nconverters = ["float8"]')
    path = tmp_path / "fp8.toml"
    section = '\n[float8]\nenable_fsdp_float8_all_gather = true\nfilter_fqns = ["output"]\n'
    path.write_text(text + section)
    job = read_config(path, gpus=8)
    assert job.options["precision"] == "fp8"  # though [training] bf16 came after [model]
    (converters,) = [f for f in job.fields if f.name == "model.converters"]
    assert "fp8" in converters.became and not converters.ignored
    assert main(["explain-config", str(path)]) == 0
    assert "where weights and tokenizer live" not in capsys.readouterr().out.split(
        "model.converters"
    )[1].splitlines()[0]
    plain = read_config(EXAMPLES / "torchtitan_llama3_8b.toml", gpus=8)
    assert plain.options["precision"] == "amp-bf16"
    # the [float8] section without the converter: torchtitan builds no float8 layer, and
    # explain-config says so of each of its settings (it called them details fp8 fixes)
    alone = tmp_path / "section_only.toml"
    alone.write_text((EXAMPLES / "torchtitan_llama3_8b.toml").read_text() + section)
    job = read_config(alone, gpus=8)
    assert job.options["precision"] == "amp-bf16"
    settings = [f for f in job.fields if f.name.startswith("float8.")]
    assert len(settings) == 2 and all("converters" in f.ignored for f in settings)


def test_a_torchrun_launch_plans_for_its_gpus(tmp_path, capsys):
    # issue 36, item 7: `torchrun --nproc_per_node 4` planned for 8 GPUs, and explain-config
    # listed none of torchrun's arguments
    text = (EXAMPLES / "megatron_gpt_1.3b.sh").read_text()
    text = text.replace("--nproc_per_node 8", "--nproc_per_node 4 --nnodes 2 --master_port 29500")
    path = tmp_path / "launch.sh"
    path.write_text(text)
    job = read_config(path)
    assert (job.gpus, job.gpus_per_node) == (8, 4) and job.parallel["dp"] == 4  # 8 / tp 2
    names = {f.name: f for f in job.fields}
    assert names["torchrun --nproc_per_node"].became == "--gpus-per-node 4"
    assert names["torchrun --nnodes"].became == "--gpus 8 (2 x 4)"
    assert names["torchrun --master_port"].ignored
    one = tmp_path / "one.sh"
    one.write_text(text.replace("--nnodes 2", "--nnodes 1"))
    assert main(["plan", "--config", str(one), "--gpu", "a100", "--json", "--top", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"] == 4 and doc["gpus_per_node"] == 4
    assert main(["plan", "--config", str(one), "--gpu", "a100", "--gpus", "8", "--json",
                 "--top", "1"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["gpus"] == 8  # the command line wins


def test_serving_a_training_job_serves_its_dtype(capsys):
    # issue 36, item 7: `serve --config` of a torchtitan bf16 job served fp16
    job = read_config(EXAMPLES / "torchtitan_llama3_8b.toml", gpus=8)
    assert job.cli_values("serve")["precision"] == "bf16"
    megatron = read_config(EXAMPLES / "megatron_gpt_1.3b.sh")
    assert megatron.cli_values("serve")["precision"] == "bf16"


def test_a_model_configs_unknown_key_is_listed_as_ignored(tmp_path):
    # issue 36, item 7: a config.json's unknown key was shown as a field of the model
    doc = json.loads((EXAMPLES / "tiny_llama_config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**doc, "rope_theta": 10000.0, "colour": "blue"}))
    job = read_config(path)
    fields = {f.name: f for f in job.fields}
    assert fields["colour"].ignored.startswith("unknown field") and not fields["colour"].became
    assert [f.name for f in job.unknown] == ["colour"]
    assert fields["hidden_size"].became and fields["rope_theta"].became


def test_megatrons_fusion_offload_and_overlap_flags_become_options(tmp_path):
    """issue 35: NVIDIA's recipes fuse the cross-entropy, offload activations and
    overlap the experts' all-to-alls; the Megatron reader listed those flags as
    unknown and priced none of them."""
    text = (EXAMPLES / "megatron_gpt_1.3b.sh").read_text().rstrip().rstrip("\\")
    path = tmp_path / "run.sh"
    flags = " --cross-entropy-loss-fusion --cpu-offloading --cpu-offloading-num-layers 6"
    path.write_text(text + flags + " --overlap-moe-expert-parallel-comm\n")
    job = read_config(path, gpus=8)
    assert job.options["loss"] == "fused"
    assert job.parallel["offload_layers"] == 6 and job.parallel["overlap_ep_comm"] is True
    became = {f.name: f.became for f in job.fields}
    assert became["--cpu-offloading-num-layers"] == "--offload-layers 6"
    # the layer count alone offloads nothing in Megatron
    path.write_text(text + " --cpu-offloading-num-layers 6\n")
    job = read_config(path, gpus=8)
    assert "offload_layers" not in job.parallel
    assert any(f.name == "--cpu-offloading-num-layers" and f.ignored for f in job.fields)


MIXTRAL_ARGS = (
    "pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
    "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu "
    "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 8 --moe-grouped-gemm "
    "--moe-token-dispatcher-type alltoall --moe-router-load-balancing-type aux_loss "
    "--moe-aux-loss-coeff 1e-2 --moe-permute-fusion --seq-length 4096 "
    "--padded-vocab-size 32000 --micro-batch-size 1 --global-batch-size 256 --bf16"
)


def _megatron_job(tmp_path, args: str, gpus: int = 8):
    path = tmp_path / "run.sh"
    path.write_text(args + "\n")
    return read_config(path, gpus=gpus)


def test_megatron_moe_arguments_become_mixtrals_layer_and_expert_parallelism(tmp_path):
    """issue 35, item 4: --num-experts was refused ("not read yet")."""
    job = _megatron_job(tmp_path, MIXTRAL_ARGS)
    assert job.model.startswith("hf:mixtral:")
    # --moe-ffn-hidden-size unset: the experts are --ffn-hidden-size wide, as Megatron's default
    for part in ("num_local_experts=8", "num_experts_per_tok=2", "intermediate_size=14336"):
        assert part in job.model
    assert job.parallel["ep"] == 8 and job.parallel["moe_dispatcher"] == "alltoall"
    fields = {f.name: f for f in job.fields}
    assert "balanced routing" in fields["--moe-aux-loss-coeff"].ignored
    assert fields["--moe-permute-fusion"].ignored and fields["--moe-grouped-gemm"].became
    assert job.unknown == []
    model = dlperf.models.load_model(job.model, batch=1, seq_len=16).module
    # Mixtral-8x7B's 46.7 B: 32 x (attention 4096 x (4096 + 2 x 1024 + 4096) = 41.9 M,
    # experts 8 x 3 x 4096 x 14336 = 1409.3 M, router 32.8 K, norms 8.2 K) + 2 x 32000 x 4096
    per_layer = 4096 * (4096 + 2 * 1024 + 4096) + 8 * 3 * 4096 * 14336 + 8 * 4096 + 2 * 4096
    expected = 32 * per_layer + 2 * 32000 * 4096 + 4096
    assert sum(p.numel() for p in model.parameters()) == expected


def test_megatron_moe_shared_expert_qk_norm_and_flex_dispatch(tmp_path):
    args = MIXTRAL_ARGS.replace("--moe-token-dispatcher-type alltoall", "--moe-enable-deepep")
    job = _megatron_job(tmp_path, args + " --qk-layernorm --kv-channels 128")
    assert job.model.startswith("hf:qwen3_moe:") and "head_dim=128" in job.model
    assert "moe_intermediate_size=14336" in job.model
    assert job.parallel["moe_dispatcher"] == "flex"
    job = _megatron_job(tmp_path, args + " --moe-shared-expert-intermediate-size 2048")
    assert job.model.startswith("hf:qwen2_moe:")
    assert "shared_expert_intermediate_size=2048" in job.model
    # Megatron's default dispatcher all-gathers: said, and priced as alltoall
    args = MIXTRAL_ARGS.replace("--moe-token-dispatcher-type alltoall", "")
    job = _megatron_job(tmp_path, args)
    assert "moe_dispatcher" not in job.parallel
    dispatcher = next(f for f in job.fields if f.name == "--moe-token-dispatcher-type")
    assert "priced as alltoall" in dispatcher.ignored


@pytest.mark.parametrize(
    "extra, gpus, message",
    [
        ("--moe-layer-freq 2", 8, "only every layer an MoE layer"),
        ("--moe-router-topk 9", 8, "more than the 8 experts"),
        # dp 8 at ep 8: ep divides dp, so the experts split over tp (2 here), not 1
        ("--tensor-model-parallel-size 2 --expert-tensor-parallel-size 1", 16, "dlperf runs 2"),
        ("--moe-token-dispatcher-type ring", 8, "expected allgather, alltoall or flex"),
    ],
)
def test_megatron_moe_arguments_dlperf_cannot_run_are_one_line_errors(
    tmp_path, extra, gpus, message
):
    with pytest.raises(DlperfError, match=message):
        _megatron_job(tmp_path, MIXTRAL_ARGS.replace("--moe-router-topk 2", "") + " " + extra,
                      gpus)  # fmt: skip


def test_megatron_experts_need_swiglu_and_expert_parallelism_needs_experts(tmp_path):
    gpt = MIXTRAL_ARGS.replace("--swiglu", "")
    with pytest.raises(DlperfError, match="Llama-shaped models only"):
        _megatron_job(tmp_path, gpt)
    dense = MIXTRAL_ARGS.replace("--num-experts 8", "")
    with pytest.raises(DlperfError, match="needs --num-experts"):
        _megatron_job(tmp_path, dense)


def test_vllm_async_scheduling_flags(tmp_path):
    """vLLM schedules the next step while one runs unless --no-async-scheduling."""
    path = tmp_path / "serve.sh"
    path.write_text("vllm serve meta-llama/Llama-3.1-8B --no-async-scheduling --max-num-seqs 64\n")
    job = read_config(path)
    assert job.run_options("serve")["async_scheduling"] is False
    path.write_text("vllm serve meta-llama/Llama-3.1-8B --async-scheduling\n")
    job = read_config(path)
    assert "async_scheduling" not in job.run_options("serve") and job.unknown == []


def test_megatron_recompute_modules_take_a_list(tmp_path):
    """`--recompute-modules core_attn mlp` is one flag with two values: it was
    refused ("mlp: a value without its flag"). It becomes --checkpoint
    selective:core_attn+mlp; modules dlperf does not price are listed."""
    base = ("pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 "
            "--seq-length 128 --bf16 --recompute-granularity selective ")  # fmt: skip
    job = _megatron_job(tmp_path, base + "--recompute-modules core_attn mlp --micro-batch-size 2")
    assert job.options["checkpoint"] == "selective:core_attn+mlp" and job.micro_batch == 2
    field = next(f for f in job.fields if f.name == "--recompute-modules")
    assert field.value == "core_attn mlp" and field.became
    job = _megatron_job(tmp_path, base + "--recompute-modules moe_act layernorm")
    assert job.options["checkpoint"] == "selective:layernorm"
    field = next(f for f in job.fields if f.name == "--recompute-modules")
    assert "moe_act not priced" in field.ignored
    job = _megatron_job(tmp_path, base + "--recompute-modules moe_act")
    assert job.options["checkpoint"] == "none"
    job = _megatron_job(tmp_path, base + "--recompute-modules core_attn")
    assert job.options["checkpoint"] == "selective" and job.unknown == []


def test_megatron_expert_parallelism_1_dispatches_nothing(tmp_path):
    """ep 1 (Megatron's default) sends no token to another GPU: the flags are
    read as changing nothing, on a dense model too (it was refused)."""
    dense = MIXTRAL_ARGS.replace("--num-experts 8", "").replace(
        "--expert-model-parallel-size 8", "--expert-model-parallel-size 1")  # fmt: skip
    job = _megatron_job(tmp_path, dense)
    assert "ep" not in job.parallel and "moe_dispatcher" not in job.parallel
    moe = MIXTRAL_ARGS.replace("--expert-model-parallel-size 8", "--expert-model-parallel-size 1")
    job = _megatron_job(tmp_path, moe)
    assert "moe_dispatcher" not in job.parallel
    ignored = {f.name: f.ignored for f in job.fields if f.ignored}
    assert "no token is dispatched" in ignored["--moe-token-dispatcher-type"]


def test_megatron_cuda_graph_flags_become_cuda_graphs_and_their_scope(tmp_path):
    """issue 35: NVIDIA's MoE recipes graph attention and the router only
    (--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router
    moe_preprocess), leaving the experts to the host; the reader listed the
    flags as unknown and priced the step without graphs."""
    scoped = " --cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router"
    job = _megatron_job(tmp_path, MIXTRAL_ARGS + scoped + " moe_preprocess")
    assert job.options["cuda_graphs"] is True
    assert job.parallel["cuda_graph_scope"] == "attn+moe_router+moe_preprocess"
    whole = _megatron_job(tmp_path, MIXTRAL_ARGS + " --cuda-graph-impl full_iteration")
    assert whole.parallel["cuda_graph_scope"] == "full"
    older = _megatron_job(tmp_path, MIXTRAL_ARGS + " --enable-cuda-graph")
    assert older.options["cuda_graphs"] is True and older.parallel["cuda_graph_scope"] == "full"
    scoped = " --cuda-graph-impl local --cuda-graph-scope attn mamba"
    mamba = _megatron_job(tmp_path, MIXTRAL_ARGS + scoped)
    assert mamba.parallel["cuda_graph_scope"] == "attn"
    assert any(f.name == "--cuda-graph-scope" and f.ignored for f in mamba.fields)
    none = _megatron_job(tmp_path, MIXTRAL_ARGS)
    assert "cuda_graphs" not in none.options and "cuda_graph_scope" not in none.parallel
    with pytest.raises(dlperf.DlperfError, match="--cuda-graph-impl"):
        _megatron_job(tmp_path, MIXTRAL_ARGS + " --cuda-graph-impl cudnn")
