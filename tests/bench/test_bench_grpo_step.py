"""The counting and reporting of ``bench/grpo_step.py``'s realistic workloads: useful against executed work, and
the tables of docs/performance.md recomputed from the committed run data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from grpo_step_common import group_counts  # noqa: E402
from grpo_step_report import render_realistic  # noqa: E402


def test_useful_work_is_the_rows_of_groups_whose_rewards_differ_with_their_prompt_once():
    # three groups of 2: mixed, all 0, mixed with an unscorable (NaN) row that still differs from nothing
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, float("nan")]
    prompt_lens = [5, 5, 7, 7, 3, 3]
    completion_lens = [2, 4, 6, 8, 1, 9]
    counts = group_counts(rewards, prompt_lens, completion_lens, group=2)
    assert counts["groups"] == 3 and counts["mixed_groups"] == 1  # NaN aside, the last group is all 1.0
    assert counts["useful_rows"] == 2 and counts["useful_prompt_tokens"] == 5 and counts["useful_tokens"] == 6
    # a trainer that trains every row with its prompt
    assert counts["trained_rows"] == 6 and counts["trained_prompt_tokens"] == 30 and counts["trained_tokens"] == 30


def test_executed_work_counts_the_trained_rows_and_each_prompt_once_when_shared():
    rewards = [1.0, 0.0, 0.0, 0.0]
    trained = [True, True, False, False]
    counts = group_counts(rewards, [5, 5, 7, 7], [2, 4, 6, 8], group=2, trained_rows=trained, prompt_once=True)
    assert counts["trained_rows"] == 2 and counts["trained_prompt_tokens"] == 5 and counts["trained_tokens"] == 6
    assert {k: counts[f"useful_{k}"] for k in ("rows", "prompt_tokens", "tokens")} == {
        k: counts[f"trained_{k}"] for k in ("rows", "prompt_tokens", "tokens")}
    separate = group_counts(rewards, [5, 5, 7, 7], [2, 4, 6, 8], group=2, trained_rows=trained)
    assert separate["trained_prompt_tokens"] == 10


def test_the_docs_tables_are_the_committed_run_rendered():
    data = ROOT / "docs" / "results" / "grpo_step_realistic.json"
    doc = (ROOT / "docs" / "performance.md").read_text()
    if not data.exists():
        pytest.fail("docs/results/grpo_step_realistic.json is missing: the realistic tables have no data")
    begin, end = "<!-- grpo_step.py:realistic:begin -->\n", "<!-- grpo_step.py:realistic:end -->"
    block = doc[doc.index(begin) + len(begin) : doc.index(end)]
    assert block == render_realistic(json.loads(data.read_text())), (
        "docs/performance.md differs from its data: python bench/grpo_step.py --render "
        "docs/results/grpo_step_realistic.json --write docs/performance.md")
