"""docs/performance.md's asynchronous-rollouts block is its committed measurements rendered."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from async_rollouts import BEGIN, END, render  # noqa: E402
from provenance import doc_block  # noqa: E402


def test_the_docs_block_is_the_committed_measurements_rendered():
    doc = (ROOT / "docs" / "performance.md").read_text()
    block = doc_block(doc, BEGIN, END)
    assert block == render(), "docs/performance.md differs from its data: python bench/async_rollouts.py --write docs/performance.md"
