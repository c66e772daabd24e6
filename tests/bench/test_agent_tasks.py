"""docs/agents.md's table of the real-model tool tasks is its committed measurements rendered, and the rendering
reads every stage it names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from agent_tasks import BEGIN, END, RESULTS, render, wilson  # noqa: E402
from provenance import doc_block  # noqa: E402


def test_the_docs_table_is_the_committed_measurements_rendered():
    doc = (ROOT / "docs" / "agents.md").read_text()
    block = doc_block(doc, BEGIN, END)
    assert block == render(RESULTS), "docs/agents.md differs from its data: python bench/agent_tasks.py --write docs/agents.md"


def test_committed_measurements_hold_no_absolute_path():
    for path in RESULTS.rglob("*.json"):
        text = path.read_text()
        assert "/work/" not in text and "/root/" not in text and "/home/" not in text and "/tmp/" not in text, path


def test_render_reads_each_stage(tmp_path):
    task = tmp_path / "calc"
    task.mkdir()
    probe = {"split": "val", "prompts": 500, "samples": 2, "sampled_accuracy": 0.25,
             "episodes": {"with_call": 0.5, "truncated": 0.125}}
    (task / "sft_start.json").write_text(json.dumps(probe))
    (task / "no_tool.json").write_text(json.dumps({**probe, "samples": 1, "sampled_accuracy": 0.5}))
    (task / "after_rl.json").write_text(json.dumps({**probe, "sampled_accuracy": 0.5}))
    curve = {"steps": 6, "summary": {"training_min": 9.5},
             "per_step": {"rollout/reward_mean": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
                          "env/tool_calls_mean": [0.5, 0.5, 1.0, 1.0, 1.0, 1.5]}}
    (task / "curve.json").write_text(json.dumps(curve))
    lines = render(tmp_path).splitlines()
    # one sample per prompt: Wilson's interval of 250 in 500, 0.5 -+ 1.96 / (1 + 1.96^2 / 500) * sqrt(0.25 / 500 + ...)
    assert lines[2] == "| calc | base model, no tool (one turn) | 500 (val) | 0.500 (0.456-0.544) | - | 0.125 |"
    assert lines[3] == "| calc | after the supervised start (RL's start) | 500 (val) | 0.250 | 0.500 | 0.125 |"
    assert lines[4] == "| calc | after GRPO | 500 (val) | 0.500 | 0.500 | 0.125 |"
    # the first and the last five steps' means: (0+.1+.2+.3+.4)/5 and (.1+.2+.3+.4+.5)/5
    assert lines[5] == ("| calc | during GRPO (6 steps, 9.5 min): first and last 5 steps | 64 per step (train) | "
                        "0.200 -> 0.300 | 0.80 -> 1.00 calls per episode | |")
    assert lines[6] == "| calc | **change by GRPO** | | **+25.0 points** | | |"
    assert len(lines) == 7


def test_wilson_interval_matches_its_closed_form_at_the_edges_and_the_middle():
    # 0 of n: [0, z^2 / (n + z^2)]; n of n: [n / (n + z^2), 1]  (z = 1.959964)
    z2 = 1.959964**2
    low, high = wilson(0, 500)
    assert low == 0.0 and abs(high - z2 / (500 + z2)) < 1e-12
    low, high = wilson(500, 500)
    assert abs(low - 500 / (500 + z2)) < 1e-12 and high == 1.0
    low, high = wilson(50, 100)  # 0.5 -+ 1.96 / 1.0384 * sqrt(0.0025 + 0.000096) = 0.5 -+ 0.09617
    assert abs((low + high) / 2 - 0.5) < 1e-12 and abs(high - 0.5 - 0.09617) < 1e-5
