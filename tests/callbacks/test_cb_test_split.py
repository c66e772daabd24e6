"""TestSplitReport: the test split scored after training (and before), per-prompt results and their SEs."""

import csv
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_grpo.callbacks import TestSplitReport
from lit_grpo.diagnostics.passk import pass_at_k_per_prompt
from tests.callbacks.events import read_events


def _last(ev, tag):
    return ev.Scalars(tag)[-1].value


def test_scores_the_test_split_before_and_after_and_writes_per_prompt_results(fit_run):
    plain = fit_run([], max_steps=2, name="plain")
    run = fit_run([TestSplitReport(samples=4, before=True, pass_at_k=True, min_prompts=8)], max_steps=2, name="test")
    for a, b in zip(plain.module.policy.parameters(), run.module.policy.parameters(), strict=True):
        assert torch.equal(a, b)  # scoring draws under a forked RNG
    ev = read_events(run.log_dir)
    rows = list(csv.DictReader(open(Path(run.log_dir) / "test_prompts.csv")))
    assert len(rows) == 8 and rows[0]["id"].startswith("test-") and rows[0]["samples"] == "4"
    greedy = torch.tensor([float(r["greedy"]) for r in rows], dtype=torch.float64)
    correct = torch.tensor([int(r["correct"]) for r in rows])
    assert _last(ev, "test/num_prompts") == 8
    assert _last(ev, "test/accuracy") == pytest.approx(greedy.mean().item(), abs=1e-6)
    assert _last(ev, "test/reward_mean") == pytest.approx(correct.double().mean().item() / 4, abs=1e-6)
    se = (correct.double() / 4).std().item() / math.sqrt(8)
    assert _last(ev, "test/reward_mean_se") == pytest.approx(se, abs=1e-6)
    for k in (1, 2, 4):
        assert _last(ev, f"test/pass@{k}") == pytest.approx(pass_at_k_per_prompt(correct, 4, k).mean().item(), abs=1e-6)
    assert [e.step for e in ev.Scalars("test/before/accuracy")] == [0]
    assert [e.step for e in ev.Scalars("test/accuracy")] == [2]
    before = torch.tensor([float(r["before_greedy"]) for r in rows]).mean().item()
    assert _last(ev, "test/before/accuracy") == pytest.approx(before, abs=1e-6)
    assert 0 <= _last(ev, "test/answer_top_share") <= 1 and _last(ev, "test/answer_entropy") >= 0


def test_too_few_test_prompts_fail_at_setup(fit_run):
    with pytest.raises(ValueError, match="fewer than min_prompts=1000.*num_test"):
        fit_run([TestSplitReport(min_prompts=1000)], max_steps=1)


def test_options_are_checked():
    with pytest.raises(ValueError, match="samples"):
        TestSplitReport(samples=-1)
    with pytest.raises(ValueError, match="pass_at_k needs samples"):
        TestSplitReport(samples=0, pass_at_k=True)


def test_bounded_answers_get_chance_skill_and_answer_entropy():
    cb = TestSplitReport(samples=4)
    result = {
        "id": ["a", "b", "c"],
        "greedy": [1, 0, 1],
        "correct": [4, 1, 2],
        "choices": [2, 4, 4],
        "answers": [["A"] * 4, ["A", "B", "A", "A"], ["C", "C", "A", "A"]],
    }
    m = cb.summary(result)
    assert m["chance"] == pytest.approx((1 / 2 + 1 / 4 + 1 / 4) / 3)
    skill = [(1.0 - 0.5) / 0.5, (0.25 - 0.25) / 0.75, (0.5 - 0.25) / 0.75]
    assert m["skill"] == pytest.approx(sum(skill) / 3)
    probs = torch.tensor([9 / 12, 1 / 12, 2 / 12], dtype=torch.float64)  # A 9, B 1, C 2 of the 12 samples
    assert m["answer_top_share"] == pytest.approx(9 / 12)
    assert m["answer_entropy"] == pytest.approx(-(probs * probs.log()).sum().item())
    collapsed = cb.summary({**result, "answers": [["A"] * 4] * 3})
    assert collapsed["answer_entropy"] == 0.0 and collapsed["answer_top_share"] == 1.0


def test_setup_refuses_a_source_without_a_test_split():
    source = SimpleNamespace(has_split=lambda split: split != "test")
    trainer = SimpleNamespace(loggers=[object()], datamodule=SimpleNamespace(source=source, test_dataloader=list))
    module = SimpleNamespace(engine=None, score=None, sampling=None)
    with pytest.raises(ValueError, match="needs a test split"):
        TestSplitReport().setup(trainer, module, "fit")
