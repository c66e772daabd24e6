"""Committed measurements record how they were made without a path of the machine that made them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from provenance import command, portable  # noqa: E402

#: an absolute path of a machine's home, scratch or work folders
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|root|home|tmp|Users)/")


def test_a_command_keeps_its_arguments_and_drops_the_machines_folders(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    recorded = command("bench/real_engines.py", ["--parts", "hf", f"--out={tmp_path}/runs/x.json",
                                                 str(ROOT / "docs" / "results" / "y.json"), "/elsewhere/z.json"])
    assert recorded == ("python bench/real_engines.py --parts hf --out=runs/x.json docs/results/y.json z.json")
    assert portable("runs/relative") == "runs/relative"


def test_no_committed_doc_or_config_holds_a_path_of_the_machine_that_wrote_it():
    files = [p for folder in ("docs", "configs", "experiments") for p in (ROOT / folder).rglob("*")
             if p.suffix in {".md", ".json", ".yaml", ".csv"}] + [ROOT / "README.md"]
    found = {str(p.relative_to(ROOT)) for p in files if MACHINE_PATH.search(p.read_text(errors="replace"))}
    assert not found, f"absolute paths of a machine in {sorted(found)}: write them relative to the repository"
