"""docs/data.md's table of SmolLM2's sampled start on reasoning-gym cells is its committed measurements rendered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import doc_block  # noqa: E402
from reasoning_gym_start import BEGIN, CELLS, END, RESULTS, render  # noqa: E402


def test_the_docs_table_is_the_committed_measurements_rendered():
    block = doc_block((ROOT / "docs" / "data.md").read_text(), BEGIN, END)
    assert block == render(RESULTS), (
        "docs/data.md differs from its data: python bench/reasoning_gym_start.py --write docs/data.md"
    )


def test_committed_measurements_name_their_settings_and_no_absolute_path():
    text = RESULTS.read_text()
    assert "/work/" not in text and "/root/" not in text and "/home/" not in text and "/tmp/" not in text
    data = json.loads(text)
    assert {"command", "model", "prompts", "samples", "temperature", "threads", "seed"} <= set(data["settings"])
    assert set(data["cells"]) <= set(CELLS)
    for row in data["cells"].values():
        assert 0.0 <= row["accuracy"] <= row["score_mean"] + 1e-9 <= 1.0 + 1e-9  # a 1 counts in both
        assert row["max_new_tokens"] > 0 and row["answer_format"] in ("tag", "last_number")


def test_render_writes_one_row_per_cell(tmp_path):
    settings = {"command": "python bench/reasoning_gym_start.py", "model": "m", "prompts": 32, "samples": 4,
                "temperature": 1.0, "engine": "hf", "threads": 1, "seed": 0}
    row = {"config": {"min_terms": 2}, "answer_format": "last_number", "max_new_tokens": 32, "accuracy": 0.125,
           "score_mean": 0.2, "groups_all_wrong": 0.625, "no_answer": 0.05, "truncated": 0.0, "len_mean": 12.4}
    path = tmp_path / "start.json"
    path.write_text(json.dumps({"settings": settings, "cells": {"chain_sum/2x1": row, "x": {**row, "config": {}}}}))
    lines = render(path).splitlines()
    assert lines[2].startswith("| cell | config | reading, max_new_tokens | accuracy (score = 1) |")
    assert lines[4] == "| chain_sum/2x1 | min_terms=2 | last_number, 32 | 0.125 | 0.200 | 0.625 | 0.050 | 0.000 | 12 |"
    assert lines[5].startswith("| x | defaults |") and len(lines) == 6
