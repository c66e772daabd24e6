"""docs/results.md section 9's sizing block is scripts/size_search_agent_study.py's rendering of the committed
pilot data, and the registered design is the one the experiment's YAML runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from lit_grpo.lab.loader import load_experiment

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("size_study", ROOT / "scripts/size_search_agent_study.py")
size = importlib.util.module_from_spec(spec)
sys.modules["size_study"] = size  # its dataclass looks its module up
spec.loader.exec_module(size)


def test_the_sizing_block_is_rendered_from_the_pilot():
    doc = (ROOT / "docs/results.md").read_text()
    block = doc[doc.index(size.BEGIN) + len(size.BEGIN): doc.index(size.END)]
    assert block == size.render(size.sizing()), "python scripts/size_search_agent_study.py --write docs/results.md"


def test_the_registered_design_is_what_the_experiment_runs():
    exp = load_experiment(ROOT / "experiments/search_agent_estimators.yaml")
    registered = size.DESIGNS[-1]
    assert len(exp.arms) == registered.arms and len(exp.seeds) == registered.final_seeds
    assert len(dict(exp.sweep)["lr"]) == registered.grid and len(exp.select.seeds) == registered.selection_seeds
    assert exp.test["max_prompts"] == exp.test["min_prompts"] == registered.test_questions
    s = size.sizing()
    lines = (ROOT / "experiments/search_agent_estimators.yaml").read_text().splitlines()
    header = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    d = s["designs"][-1]
    for quoted in (f"sd at {s['sd_difference']:.3f}", f"upper 80% bound {s['sd_upper80']:.2f}",
                   f"{d['detectable_holm_first']:.3f} at Holm's first step", f"{d['wall_h']:.1f} hours wall",
                   f"{s['pilot_run_s']:.0f} s on average"):
        assert quoted in header, quoted
