"""docs/performance.md's shared-prefix table is its committed run rendered, and that run's three paths agree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import doc_block  # noqa: E402
from shared_prefix import BEGIN, DATA, END, TABLE, render  # noqa: E402


def test_the_docs_block_is_the_committed_run_rendered():
    rows = json.loads(DATA.read_text())["rows"]
    block = doc_block((ROOT / "docs" / "performance.md").read_text(), BEGIN, END)
    assert block == "\n" + render(rows), \
        "docs/performance.md differs from its data: python bench/shared_prefix.py --render --json " \
        "docs/results/shared_prefix.json --write docs/performance.md"


def test_the_run_covers_the_table_and_its_paths_agree():
    rows = json.loads(DATA.read_text())["rows"]
    assert [(r["P"], r["G"], r["prompt_tokens"], r["completion_tokens"], r["reps"]) for r in rows] == \
        [row[1:] for row in TABLE]
    for r in rows:  # float32 over at most 30 layers: far below 1e-3 when the paths compute the same thing
        assert r["packed_max_abs_logp_diff"] < 1e-3 and r["packed_max_rel_grad_diff"] < 1e-3
        assert r["shared_prefix_max_abs_logp_diff"] < 1e-3 and r["shared_prefix_max_rel_grad_diff"] < 1e-3
