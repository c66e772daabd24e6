"""bench/agent_step.py: its arms are what it says they are, and the tables of docs/agents.md and
docs/performance.md are its committed data rendered."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import agent_step  # noqa: E402
from provenance import doc_block  # noqa: E402

from lit_grpo.rollout import HFGenerateEngine  # noqa: E402


def _engine(args: list[str]):
    from lit_grpo.cli import LitGRPOCLI

    return LitGRPOCLI(args=args[1:], run=False).model.engine


@pytest.mark.parametrize("task", agent_step.TASKS)
def test_the_arms_are_the_path_before_and_todays_defaults(task, monkeypatch):
    monkeypatch.chdir(ROOT)
    default = HFGenerateEngine()
    for arm in agent_step.ARMS:
        if arm == "vllm":
            if importlib.util.find_spec("vllm") is not None:
                assert type(_engine(agent_step.fit_args(task, arm, 3, 0)).engine).__name__ == "VLLMEngine"
            continue
        episodes = _engine(agent_step.fit_args(task, arm, 3, 0))
        hf = episodes.engine
        got = (hf.shrink, hf.sampler, hf.episode_cache_mib)
        if arm == "before":  # the whole histories and generate's draws, as the configs pinned them
            assert got == (False, "multinomial", 0)
        else:  # today's defaults, whatever they are
            assert got == (default.shrink, default.sampler, default.episode_cache_mib)
        assert episodes.max_turns == (1 if arm == "single" else _engine(["fit", "--config", str(
            ROOT / "configs" / "real" / f"{task}.yaml")]).max_turns)
    assert agent_step.ARMS["before"][1] and not agent_step.ARMS["after"][1]  # the head over every token, before


def _data() -> dict:
    if not agent_step.RESULTS.exists():
        pytest.skip("bench/agent_step.py has not been published")
    return json.loads(agent_step.RESULTS.read_text())


@pytest.mark.parametrize("doc", ["agents.md", "performance.md"])
def test_the_docs_tables_are_the_committed_data_rendered(doc):
    text = (ROOT / "docs" / doc).read_text()
    if not agent_step.RESULTS.exists():  # no number may stand where no data is
        assert f"{agent_step.BEGIN}" not in text and "not measured yet" in text
        return
    block = doc_block(text, agent_step.BEGIN, agent_step.END)
    assert block == agent_step.render(_data()), \
        f"docs/{doc} differs from its data: python bench/agent_step.py --render --write docs/{doc}"


def test_the_committed_data_holds_no_machine_path():
    text = agent_step.RESULTS.read_text() if agent_step.RESULTS.exists() else ""
    assert not any(root in text for root in ("/work/", "/root/", "/home/", "/tmp/"))


def test_the_summary_reads_the_steps_after_the_first():
    steps = [{**{p: 100.0 for p in agent_step.PHASES}, "sampled_tokens": 10, "completion_tokens": 100,
              "prefill_tokens": 5, "decode_tokens": 5, "env_s": 1.0}]
    later = {**steps[0], "generate_s": 2.0, "forward_s": 1.0, "backward_s": 1.0, "sampled_tokens": 8}
    summary = agent_step.summary({"steps": [*steps, later, later]})
    assert summary["generate_s"] == 2.0 and summary["generated_per_s"] == 4.0
    assert summary["train_ms_per_token"] == 20.0  # (1 + 1) s over 100 completion tokens
