"""docs/performance.md's shared-prefill table and the sentence under it say what docs/results/hf_shared_prefill.json
(``bench/shared_prefill.py --out``) measured."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "docs" / "results" / "hf_shared_prefill.json").read_text())
#: workload -> (the table's model name, seconds' digits)
ROWS = {"real": ("SmolLM2-135M-Instruct", 1), "tiny": ("`tiny-arith-sft`", 3)}


def _cell(summary: dict, digits: int) -> str:
    return f"{summary['median']:.{digits}f} ({summary['min']:.{digits}f}-{summary['max']:.{digits}f})"


def _sci(x: float) -> str:
    """``2.1e-5`` as the doc writes it (Python writes ``2.1e-05``)."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def test_the_shared_prefill_table_is_the_committed_run():
    doc = (ROOT / "docs" / "performance.md").read_text()
    for workload, (name, digits) in ROWS.items():
        r = DATA[workload]
        row = (f"| {name} | {r['P']} x {r['n']} | {r['prompt_tokens_mean']:.0f} / {r['max_new_tokens']} | "
               f"{_cell(r['plain_s'], digits)} | {_cell(r['shared_prefill_s'], digits)} | "
               f"{_cell(r['paired_speedup'], 2)} |")
        assert row in doc, f"docs/performance.md lacks {row!r} (docs/results/hf_shared_prefill.json)"


def test_the_sentence_under_the_table_reads_the_same_run():
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    real, tiny = DATA["real"], DATA["tiny"]
    rows = [r["same_completion_rows"].split("/") for r in (real, tiny)]
    assert all(same == total for same, total in rows), "the settings no longer sampled the same tokens in every row"
    assert (f"in every row ({rows[0][1]} and {rows[1][1]} rows), with sampling log-probs within "
            f"{_sci(real['max_abs_logprob_diff_same_rows'])} (SmolLM2) and "
            f"{_sci(tiny['max_abs_logprob_diff_same_rows'])} (tiny)") in doc


def test_the_doc_names_the_decoder_the_run_used():
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    decoders = {r.get("decoder", "generate") for r in DATA.values()}  # runs before the field timed generate
    assert decoders == {"own"}, f"the committed run decoded with {decoders}; the doc says the own loop"
    assert "Seconds per batch through the own loop (the engine's default decoder)" in doc
