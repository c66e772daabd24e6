"""docs/performance.md's soak table is its committed run rendered, and the criterion reads flat, leaking and slowing
runs as it says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import doc_block  # noqa: E402
from soak import BEGIN, CRITERION, END, FIRST_CRITERION, RUNS, render, verdict  # noqa: E402


def test_the_docs_block_is_the_committed_run_rendered():
    doc = (ROOT / "docs" / "performance.md").read_text()
    block = doc_block(doc, BEGIN, END)
    assert block == render(), "docs/performance.md differs from its data: python bench/soak.py --write docs/performance.md"


def test_each_committed_run_reads_its_own_criterion():
    criteria = [FIRST_CRITERION, CRITERION]
    for path, criterion in zip(RUNS, criteria, strict=True):
        if path.is_file():
            record = json.loads(path.read_text())
            assert record["criterion"] == criterion and record["verdict"] == verdict(record["samples"], criterion)


def _run(rss, step_s) -> list[dict]:
    return [{"step": 100 * (i + 1), "rss_mib": rss(i), "step_s_median": step_s(i)} for i in range(50)]


def test_a_flat_run_holds():
    parts = verdict(_run(lambda i: 500.0 + (i % 3), lambda i: 0.07 + 0.001 * (i % 2)), FIRST_CRITERION)
    assert all(part["holds"] for part in parts.values())


def test_a_leak_of_5_mib_per_1000_steps_fails_the_slope_and_the_rise():
    parts = verdict(_run(lambda i: 500.0 + 0.5 * i, lambda i: 0.07), FIRST_CRITERION)
    assert parts["rss_slope_mib_per_1000"]["value"] == pytest.approx(5.0)
    assert not parts["rss_slope_mib_per_1000"]["holds"] and not parts["rss_rise_mib"]["holds"]
    assert parts["step_time_ratio"]["holds"]


def test_a_run_that_slows_by_a_fifth_fails_the_step_time():
    parts = verdict(_run(lambda i: 500.0, lambda i: 0.07 if i < 30 else 0.084), FIRST_CRITERION)
    assert parts["step_time_ratio"]["value"] == pytest.approx(1.2) and not parts["step_time_ratio"]["holds"]


def test_a_run_too_short_to_judge_is_refused():
    with pytest.raises(ValueError, match="samples after the warm-up"):
        verdict(_run(lambda i: 500.0, lambda i: 0.07)[:11])


def test_the_trend_reads_noise_as_flat_and_a_steady_slowdown_as_slowing():
    noisy = verdict(_run(lambda i: 500.0, lambda i: 0.07 * (1 + 0.1 * ((i * 7) % 5 - 2) / 2)))["step_time_trend"]
    assert noisy["verdict"] == "flat", noisy  # +-10% noise without a trend: the fitted change stays near 0
    slowing = verdict(_run(lambda i: 500.0, lambda i: 0.07 * (1 + 0.005 * i)))["step_time_trend"]
    low, change, high = slowing["value"]
    assert slowing["verdict"] == "slows" and change == pytest.approx(0.005 * 39 / (1 + 0.005 * 29.5), abs=1e-3)
    assert low == pytest.approx(change, abs=1e-3)  # a straight line: no residual, the interval is the point
