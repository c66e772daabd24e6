"""SmolLM2-135M-Instruct with tools, end to end on the real configs shrunk to a few steps: the supervised start on
demonstration episodes writes a merged policy, GRPO trains episodes of that policy with the calculator, and the
search agent's episodes run BM25 over the shipped collection. These check behaviour; the accuracy the configs
reach is measured in docs/agents.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning import Callback

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.envs.demonstrations import IGNORE
from tests.real.conftest import NAME

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


class Episodes(Callback):
    """Keeps each training step's episodes."""

    def __init__(self) -> None:
        self.seen: list[list] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen.append(outputs["rollout"].rollouts.episodes)


def shrunk(config: str, tmp_path: Path, *extra: str) -> list[str]:
    return ["--config", str(ROOT / "configs" / "real" / config), "--data.prompts_per_step=2",
            "--trainer.max_steps=2", "--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={tmp_path}", *extra]  # fmt: skip


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the configs' relative output paths (runs/...) land here
    return tmp_path


def test_calculator_supervised_start_then_grpo_on_episodes(real_model, in_tmp):
    sft = LitGRPOCLI(args=["fit", *shrunk("calculator_sft.yaml", in_tmp, "--trainer.callbacks=[]",
                                          "--trainer.callbacks+=lit_grpo.callbacks.SavePretrained",
                                          "--trainer.callbacks.dirpath=runs/calculator_sft/policy",
                                          "--trainer.callbacks.merge=true")])
    module, tok = sft.model, sft.model.tokenizer
    batch = next(iter(sft.datamodule.train_dataloader()))
    ids, labels, _ = module.encode(batch)
    trained = tok.decode(ids[0][labels[0] != IGNORE])
    a, b = batch.columns["a"][0], batch.columns["b"][0]
    assert trained == (f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a} * {b}"}}}}</tool_call>'
                       f"<|im_end|>{a} * {b} = {a * b}<|im_end|>")
    assert f"<tool_response>\n{a * b}\n</tool_response>" in tok.decode(ids[0])  # the calculator really ran
    merged = in_tmp / "runs" / "calculator_sft" / "policy" / "merged"
    assert (merged / "config.json").is_file() and sft.trainer.global_step == 2

    grpo = LitGRPOCLI(args=["fit", *shrunk("calculator.yaml", in_tmp, "--model.group_size=2",
                                           "--model.sampling.max_new_tokens=32", "--trainer.callbacks=[]",
                                           "--trainer.callbacks+=tests.real.test_real_tools.Episodes")])
    assert Path(grpo.model.model_name).resolve() == merged.resolve()  # RL starts from the supervised start
    episodes = next(c for c in grpo.trainer.callbacks if type(c).__name__ == "Episodes").seen
    assert grpo.trainer.global_step == 2 and len(episodes) == 2 and all(len(e) == 4 for e in episodes)
    for ep in (e for step in episodes for e in step):
        assert 1 <= ep.turns <= 3 and ep.messages[0]["role"] == "system"
        assert ep.tool_calls == sum(m["role"] == "tool" for m in ep.messages)  # every call answered
    assert {"env/turns_mean", "env/tool_calls_mean", "env/truncated_frac"} <= set(grpo.trainer.callback_metrics)


def test_search_agent_episodes_search_the_shipped_collection(real_model, in_tmp):
    pytest.importorskip("bm25s")
    cli = LitGRPOCLI(args=["fit", *shrunk("search_agent.yaml", in_tmp, f"--model.model={NAME}", "--model.group_size=2",
                                          "--model.sampling.max_new_tokens=32", "--trainer.max_steps=1",
                                          "--trainer.callbacks=[]",
                                          "--trainer.callbacks+=tests.real.test_real_tools.Episodes")])
    episodes = next(c for c in cli.trainer.callbacks if type(c).__name__ == "Episodes").seen[0]
    env = cli.model.engine.environment
    assert len(episodes) == 4 and all(ep.turns >= 1 for ep in episodes)
    question = episodes[0].record["prompt"]
    assert question.endswith("?") and "search" in episodes[0].messages[0]["content"]
    hits = env.search(question)  # the collection holds the answer to its own questions
    assert episodes[0].record["reference"].lower() in hits.lower()
    assert torch.isfinite(torch.tensor(cli.trainer.callback_metrics["train/loss"].item()))
