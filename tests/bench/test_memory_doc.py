"""docs/scale.md's memory table is its committed run rendered, and that run covers every configuration."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from memory import BEGIN, CONFIGS, DATA, END, render  # noqa: E402
from provenance import doc_block  # noqa: E402


def test_the_docs_block_is_the_committed_run_rendered():
    report = json.loads(DATA.read_text())
    block = doc_block((ROOT / "docs" / "scale.md").read_text(), BEGIN, END)
    assert block == render(report), \
        "docs/scale.md differs from its data: python bench/memory.py --render --json docs/results/memory.json " \
        "--write docs/scale.md"


def test_the_run_covers_every_configuration_on_both_sides_with_consistent_rows():
    report = json.loads(DATA.read_text())
    for rows in (report["rows"], report["baseline"]["rows"]):
        assert [r["config"] for r in rows] == list(CONFIGS)
        for r in rows:
            assert r["load_MiB"] > 0 and r["peak_MiB"] >= r["load_MiB"]
            # the peak is read twice, microseconds apart, when the row is built: it may grow by a few pages between
            assert abs(r["train_MiB"] - (r["peak_MiB"] - r["load_MiB"])) < 1
            assert r["trainable_M"] <= r["params_M"]
