"""docs/agents.md's tool-concurrency block is its committed run rendered, and the run is the one the doc describes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import doc_block  # noqa: E402
from tool_concurrency import BEGIN, DATA, END, render  # noqa: E402


def test_the_docs_block_is_the_committed_run_rendered():
    data = json.loads(DATA.read_text())
    block = doc_block((ROOT / "docs" / "agents.md").read_text(), BEGIN, END)
    assert block == "\n" + render(data), \
        "docs/agents.md differs from its data: python bench/tool_concurrency.py --render --json " \
        "docs/results/agents/tool_concurrency.json --write docs/agents.md"


def test_the_run_has_sixteen_episodes_in_flight_in_every_mode_and_records_the_machine():
    data = json.loads(DATA.read_text())
    assert {r["mode"] for r in data["rows"]} == {"before", "serial", "process", "async"}
    assert all(r["episodes"] == 16 and len(r["seconds"]) >= 3 for r in data["rows"])
    assert data["machine"]["cpu_flags"] and data["machine"]["cpus"] >= 1
    assert "load_before" in data and "load_after" in data and "/" not in data["command"].split()[1][:1]
