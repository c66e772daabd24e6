"""README's quickstart table is its committed runs rendered: the config's own seed, the spread over seeds, and
whether one command gave the same numbers twice."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import changed_settings, doc_block, resolved_settings  # noqa: E402
from quickstart_runs import BEGIN, END, METRICS, RESULTS, STEPS, USERS_ARGS, render  # noqa: E402


def test_the_readme_table_is_the_committed_runs_rendered():
    block = doc_block((ROOT / "README.md").read_text(), BEGIN, END)
    assert block == render(), "README.md differs from its data: python bench/quickstart_runs.py --write README.md"


def test_the_runs_hold_every_column_and_the_repeat_of_the_first_seed():
    data = json.loads(RESULTS.read_text())
    assert data["repeat"]["seed"] == data["runs"][0]["seed"] and data["runs"][0]["seed"] == 0  # the README's command
    for run in data["runs"]:
        assert all(len(run[label]) == 1 + len(STEPS) and all(0 <= v <= 1 for v in run[label]) for label in METRICS)
    greedy_starts = {run["greedy accuracy"][0] for run in data["runs"]}
    assert len(greedy_starts) == 1  # greedy decoding of one starting policy: the same for every seed


def test_the_runs_were_measured_at_the_settings_the_readmes_command_resolves_to_today():
    data = json.loads(RESULTS.read_text())
    assert "settings" in data, "the runs record no settings: python bench/quickstart_runs.py --seeds 0 1 2 3 4"
    changed = changed_settings(data["settings"], resolved_settings(USERS_ARGS))
    assert not changed, ("the README's quickstart command resolves other settings than its published runs had "
                         f"({'; '.join(changed)}): measure again with python bench/quickstart_runs.py --seeds 0 1 2 3 "
                         "4, then python bench/quickstart_runs.py --write README.md")


def test_a_changed_default_is_named():
    recorded = {"engine": {"sampler": "multinomial", "shrink": False}, "config": {"seed": 0, "gone": 1}}
    current = {"engine": {"sampler": "inverse_cdf", "shrink": False, "new": 2}, "config": {"seed": 0}}
    assert changed_settings(recorded, current) == ["engine.sampler: 'multinomial' -> 'inverse_cdf'", "config.gone (gone)"]
