"""docs/performance.md's soak table is its committed run rendered, and the criterion reads flat, leaking and slowing
runs as it says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from soak import BEGIN, CRITERION, END, RESULTS, render, verdict  # noqa: E402


def test_the_docs_block_is_the_committed_run_rendered():
    doc = (ROOT / "docs" / "performance.md").read_text()
    block = doc[doc.index(BEGIN) + len(BEGIN) : doc.index(END)]
    assert block == render(RESULTS), "docs/performance.md differs from its data: python bench/soak.py --write docs/performance.md"


def test_the_committed_run_used_the_committed_criterion():
    record = json.loads(RESULTS.read_text())
    assert record["criterion"] == CRITERION and record["verdict"] == verdict(record["samples"])


def _run(rss, step_s) -> list[dict]:
    return [{"step": 100 * (i + 1), "rss_mib": rss(i), "step_s_median": step_s(i)} for i in range(50)]


def test_a_flat_run_holds():
    parts = verdict(_run(lambda i: 500.0 + (i % 3), lambda i: 0.07 + 0.001 * (i % 2)))
    assert all(part["holds"] for part in parts.values())


def test_a_leak_of_5_mib_per_1000_steps_fails_the_slope_and_the_rise():
    parts = verdict(_run(lambda i: 500.0 + 0.5 * i, lambda i: 0.07))
    assert parts["rss_slope_mib_per_1000"]["value"] == pytest.approx(5.0)
    assert not parts["rss_slope_mib_per_1000"]["holds"] and not parts["rss_rise_mib"]["holds"]
    assert parts["step_time_ratio"]["holds"]


def test_a_run_that_slows_by_a_fifth_fails_the_step_time():
    parts = verdict(_run(lambda i: 500.0, lambda i: 0.07 if i < 30 else 0.084))
    assert parts["step_time_ratio"]["value"] == pytest.approx(1.2) and not parts["step_time_ratio"]["holds"]


def test_a_run_too_short_to_judge_is_refused():
    with pytest.raises(ValueError, match="samples after the warm-up"):
        verdict(_run(lambda i: 500.0, lambda i: 0.07)[:11])
