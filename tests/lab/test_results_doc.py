"""docs/results.md against its committed per-run data: the numbers its verdicts turn on are recomputed from the
runs.csv files, and each verdict is read from its experiment's criterion as written."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

from lit_grpo.lab.stats import paired_t_test, t_quantile

ROOT = Path(__file__).resolve().parents[2]
RESULTS = (ROOT / "docs" / "results.md").read_text().replace("−", "-")


def _runs(name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(open(ROOT / "docs" / "results" / name / "runs.csv")))


def _by_arm(rows, column: str, **where) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        if all(row[k] == v for k, v in where.items()):
            out.setdefault(row["arm"], {})[int(row["seed"])] = float(row[column])
    return out


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _section(number: str) -> str:
    start = RESULTS.index(f"\n## {number}. ")
    return RESULTS[start:RESULTS.index("\n## ", start + 1)]


def _claims_row(section: str) -> str:
    return next(row for row in RESULTS.splitlines() if row.startswith("| ") and f"({section}) |" in row)


def test_passk_crossing_verdicts_follow_the_gain_at_k_256():
    """The criterion asks for a gain at k = 256 <= 0; an arm whose mean gain is above 0 is inconclusive (no
    arm's gain is significant either way)."""
    gains = {arm: _mean(v.values()) for arm, v in
             _by_arm(_runs("passk_crossing"), "gain in pass@256 over the starting policy").items()}
    names = {"Sign": "Sign", "GRPO": "GRPO", "DrGRPO": "Dr. GRPO"}
    section, row = _section("5"), _claims_row("5")
    for arm, gain in gains.items():
        assert f"{names[arm]}'s is {gain:+.3f}" in section.replace("Dr. GRPO's ", "Dr. GRPO's is "), (arm, gain)
        stated = "inconclusive for" if gain > 0 else "criterion met as written"
        assert re.search(rf"{stated}[^|;]*\b{re.escape(names[arm])}\b", row), (arm, gain, row)


def test_the_ablation_interval_of_sign_starvation_is_its_paired_t_interval():
    column = "sampled test accuracy after training (4 samples x 1000 prompts)"
    arms = _by_arm(_runs("sign_starvation"), column)
    sign, ablation = arms["Sign"], arms["Sign-zero-all-wrong"]
    diffs = [sign[s] - ablation[s] for s in sorted(sign)]
    mean, n = _mean(diffs), len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    _, _, p = paired_t_test([sign[s] for s in sorted(sign)], [ablation[s] for s in sorted(sign)])
    assert f"[{mean - half:.4f}, {mean + half:.4f}], p {p:.3f}" in _section("2b")
    assert mean + half < 0  # the interval excludes 0: "equal" cannot be read from it, so the verdict is
    assert "inconclusive" in _claims_row("2b")  # inconclusive by the criterion's "anything else"


@pytest.mark.parametrize(("g", "rows", "distinct"), [(2, "2.0", "2.0"), (4, "4.0", "2.7"), (8, "8.0", "3.5")])
def test_the_distinct_rows_that_bound_one_groups_rank_count_only_measured_steps(g, rows, distinct):
    """15 measurements a run (150 steps, every 10th); an all-zero matrix is logged as 0 rows and counted in
    ``measurements skipped``, so a measured step's mean is mean x 15 / (15 - skipped)."""
    runs = [r for r in _runs("gradient_rank") if r["setting"] == f"G={g},P=1"]

    def measured(column: str) -> float:
        skipped = [float(r["measurements skipped (all-zero matrix)"]) for r in runs]
        return _mean(float(r[column]) * 15 / (15 - k) for r, k in zip(runs, skipped, strict=True))

    assert f"{measured('rows (completions with non-zero advantage) per measurement'):.1f}" == rows
    assert f"{measured('rows after de-duplication per measurement'):.1f}" == distinct
    erank = _mean(float(r["grad/erank (mean)"]) for r in runs)
    assert erank <= float(distinct) + 0.05  # the mean rank sits below the mean bound, as the text says
    text = _section("4")
    assert "held 2.0, 4.0 and 8.0 rows of which 2.0, 2.7 and 3.5 distinct" in text


def test_degeneracy_plug_in_row_is_d_minus_the_prediction():
    row = next(line for line in _section("1").splitlines() if "plug-in" in line and line.startswith("|"))
    prediction, difference = (float(x) for x in re.findall(r"-?\d\.\d{4}", row)[:2])
    observed = float(re.search(r"observed degenerate share D \| (\d\.\d{4})", _section("1")).group(1))
    assert "D minus it" in row and difference == pytest.approx(observed - prediction, abs=1e-4)


def test_sign_balance_skill_chance_figures_come_from_its_test_split():
    """The guess rate and the best constant answer's skill on section 6's test split, from the generator itself
    (experiments/sign_balance_skill.yaml's source: quickstart's operands and seed, its sizes and moduli)."""
    from lit_grpo.data import SyntheticResidue

    test = SyntheticResidue(max_operand=99, num_train=8800, num_val=200, num_test=1000, seed=0, min_modulus=2,
                            max_modulus=10).load("test")
    chance = [1 / r["columns"]["num_choices"] for r in test]
    skill = {c: _mean(((r["reference"] == str(c)) - p) / (1 - p) for r, p in zip(test, chance, strict=True))
             for c in range(10)}
    best = max(skill, key=skill.get)
    others = sorted(v for c, v in skill.items() if c != best)
    text = _section("6")
    assert f"1/k of the time ({_mean(chance):.3f} on the test split)" in text
    assert f"the best constant answer, {best}, has skill {skill[best]:.3f}; the others {others[-1]:.3f} to " \
           f"{others[0]:.2f}" in text
