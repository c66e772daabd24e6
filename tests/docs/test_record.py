"""The words of the record against its criteria and data: each verdict below is the reading its criterion gives the
committed data, recomputed here, and each number beside it is the data's. A verdict that says more than its
criterion ("differs" where the criterion says "inconclusive", "not worse" where the registered family says
"undetermined") fails, as does a number that is not its data's."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.doc_tables import mismatches, table
from tests.docs.test_results_tables import DOC, EXPERIMENTS, _crossing, _select_rows, data

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
PERF = (ROOT / "docs" / "performance.md").read_text()
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import async_rollouts  # noqa: E402
import constant_answer_skill  # noqa: E402

ACC4 = "sampled test accuracy after training (4 samples"


def _flat(text: str) -> str:
    return " ".join(text.replace("−", "-").split())


def _section(start: str, end: str) -> str:
    return _flat(DOC[DOC.index(start):DOC.index(end)])


def _claim(start: str) -> str:
    """The verdict cell of the claims table's row starting with ``start``."""
    _, rows = table(DOC, "claim (section)")
    return _flat(next(r for r in rows if r[0].startswith(start))[4])


def _says(text: str, pattern: str, *values) -> list[str]:
    found = re.search(pattern, text)
    return [f"no {pattern!r}"] if found is None else mismatches(list(found.groups()), list(values), pattern)


# ---- verdicts read from their criteria -------------------------------------------------------------------------


def test_section_2c_reads_its_criterion_literally():
    """Its criterion: Sign - Dr. GRPO >= +0.05 with Holm p < 0.05; "a difference below 0.05 or a p above 0.05 is
    inconclusive". It names no verdict for Dr. GRPO ahead (2d's, written later, does)."""
    criterion = (ROOT / "experiments" / "real_sign_vs_drgrpo.yaml").read_text()
    assert "opposite" not in criterion and "is inconclusive" in criterion
    p = data("real_sign_vs_drgrpo").pair("sampled test", "Sign", "DrGRPO")
    reading = "met" if p["diff"] >= 0.05 and p["holm"] < 0.05 else "inconclusive"
    assert _claim("Sign above Dr. GRPO on a pretrained").startswith(reading)
    assert f"**Ours: {reading}, by the criterion's own text.**" in _section("## 2c.", "## 2d.")
    assert "differs" not in _claim("Sign above Dr. GRPO on a pretrained")


def test_section_2_criterion_a_reads_its_criterion_literally():
    """Criterion (a): a setting at lr 5e-5 or 1e-4 with Holm p < 0.05 ("agrees in direction" when its difference is
    below +0.05); no significant difference reads inconclusive. The pooled tests are no setting."""
    svd = data("sign_vs_drgrpo")
    pairs = [svd.pair(ACC4, "Sign", "NormDrGRPO", f"lr={lr},policy={p}") for lr in ("5e-5", "1e-4")
             for p in ("weak", "strong")]  # fmt: skip
    significant = [p for p in pairs if p["holm"] < 0.05 and p["diff"] > 0]
    reading = ("met" if any(p["diff"] >= 0.05 for p in significant) else "agrees in direction" if significant
               else "inconclusive")  # fmt: skip
    assert _claim("Sign above normalised Dr. GRPO").startswith(f"{reading} by criterion (a)")
    assert f"**Criterion (a): {reading}**" in _section("## 2. ", "## 2b.")
    assert min(p["holm"] for p in pairs) >= 0.05 or reading != "inconclusive"


def _passk_reading(arm: str) -> str:
    """The criterion of passk_crossing: pass@1 gain > 0 with Holm p < 0.05, crossing in >= 4 of 5 seeds and the
    mean gain at k = 256 <= 0: met; a gain at k = 256 > 0 with Holm p < 0.05: expansion; else inconclusive."""
    pk = data("passk_crossing")
    one, top = pk.one_sample("gain in pass@1 ", arm), pk.one_sample("gain in pass@256", arm)
    crossed = _crossing(arm)[0]
    if one["diff"] > 0 and one["holm"] < 0.05 and crossed >= 4 and top["diff"] <= 0:
        return "met"
    return "expansion" if top["diff"] > 0 and top["holm"] < 0.05 else "inconclusive"


def test_pass_at_k_separates_grpo_from_dr_grpo_only_as_far_as_the_data_do():
    pk = data("passk_crossing")
    readings = {arm: _passk_reading(arm) for arm in ("Sign", "GRPO", "DrGRPO")}
    assert readings == {"Sign": "met", "GRPO": "inconclusive", "DrGRPO": "met"}, "the data moved: reword section 5"
    cell = _claim("search compression")
    assert cell.startswith("criterion met as written") and "inconclusive for GRPO" in cell
    covers = all(pk.mci("gain in pass@256", arm)[1] <= 0 <= pk.mci("gain in pass@256", arm)[2] for arm in ("GRPO", "DrGRPO"))
    assert covers and "both have intervals that cover 0" in cell and "no finding" in cell
    p = pk.pair("gain in pass@256", "GRPO", "DrGRPO")
    problems = _says(_section("## 5.", "## 6."), r"GRPO - Dr\. GRPO at k = 256: ([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\], "
                     r"paired, Holm ([\d.]+)", p["diff"], p["lo"], p["hi"], p["holm"])  # fmt: skip
    assert not problems, problems


def test_the_degeneracy_excess_is_not_claimed_at_every_step():
    first = data("degeneracy").s("rollout/degenerate_excess (first)", "GRPO")
    section = _section("## 1.", "## 2. ")
    if first["ci_low"] <= 0:
        assert "throughout training" not in section
        problems = _says(section, r"At the first step the excess, ([\d.]+), is not significant \(its interval over "
                         r"the (\d) seeds is \[([+-][\d.]+), ([+-][\d.]+)\]\)", first["mean"], first["n"],
                         first["ci_low"], first["ci_high"])  # fmt: skip
        assert not problems, problems


def _async_family() -> dict[str, tuple[float, float, float]]:
    """The three accuracy comparisons against sync (two of the accuracy part, one of accuracy-tis, whose sync arm
    gives the same accuracies), Holm-adjusted together by the bench's own rule: (low, high, level)."""
    acc = json.loads((RESULTS / "async" / "accuracy.json").read_text())
    tis = json.loads((RESULTS / "async" / "accuracy-tis.json").read_text())
    assert [r["sync"] for r in acc["seeds"]] == [r["sync"] for r in tis["seeds"]]
    tests = {k: [r[k] - r["sync"] for r in acc["seeds"]] for k in ("async-k1", "async-k2")}
    tests["async-k2-tis"] = [r["async-k2-tis"] - r["sync"] for r in tis["seeds"]]
    margin, level = async_rollouts.CRITERION["accuracy_margin"], async_rollouts.CRITERION["accuracy_level"]
    out = {}
    for rank, k in enumerate(sorted(tests, key=lambda k: async_rollouts._p_below(tests[k], -margin))):
        alpha = (1 - level) / (len(tests) - rank)
        out[k] = (*async_rollouts._t_interval(tests[k], 1 - alpha), 1 - alpha)
    return out


def test_the_bench_renders_the_family_of_all_accuracy_comparisons():
    parts = {n: json.loads((RESULTS / "async" / f"{n}.json").read_text()) for n in ("accuracy", "accuracy-tis")}
    rendered = async_rollouts.holm_family(parts)
    for k, (low, high, level) in _async_family().items():
        assert rendered[k]["interval"] == [round(low, 4), round(high, 4)] and rendered[k]["level"] == round(level, 4)
    parts["accuracy-tis"]["seeds"][0]["sync"] += 0.01  # no common baseline: no family
    with pytest.raises(ValueError, match="sync arms differ"):
        async_rollouts.holm_family(parts)


def test_staleness_2_with_truncated_is_is_read_with_the_family_and_its_first_run():
    low, high, level = _async_family()["async-k2-tis"]
    margin = async_rollouts.CRITERION["accuracy_margin"]
    reading = "not worse" if low > -margin else "worse" if high < 0 else "undetermined"
    bullet = _flat(PERF[PERF.index("- **Staleness 2 with `TruncatedIS`"):PERF.index("- The sync arm gives")])
    assert bullet.startswith(f"- **Staleness 2 with `TruncatedIS` (token level, cap 2; its own question and runs): "
                             f"{reading}.**")
    problems = _says(bullet, r"its interval is ([+-][\d.]+) to ([+-][\d.]+) \(level ([\d.]+)\)", low, high, level)
    assert not problems, problems


def test_the_first_accuracy_tis_run_is_quoted_from_its_commit():
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True)  # fmt: skip
    if shallow.returncode != 0 or shallow.stdout.strip() == "true":
        pytest.skip("needs the repository's whole git history")
    bullet = _flat(PERF[PERF.index("- **Staleness 2 with `TruncatedIS`"):PERF.index("- The sync arm gives")])
    commit = re.search(r"`git show (\w+):docs/results/async/accuracy-tis.json`", bullet).group(1)
    first = json.loads(subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:docs/results/async/accuracy-tis.json"],
                                      capture_output=True, text=True, check=True).stdout)["comparisons"]["async-k2-tis"]
    problems = _says(bullet, r"read (\w+) \(([+-][\d.]+) points, ([+-][\d.]+) to ([+-][\d.]+):",
                     None, 100 * first["mean_difference"], *[100 * v for v in first["interval"]])  # fmt: skip
    assert first["verdict"] in bullet[bullet.index("first run"):][:60] and not problems, problems


def test_the_soak_trend_is_read_by_its_rule_alone():
    """The trend rule's verdicts are "flat", "slows" and undetermined; "no slowdown" is none of them."""
    trend = json.loads((RESULTS / "soak" / "quickstart-trend.json").read_text())["verdict"]["step_time_trend"]
    reading = _flat(PERF[PERF.index("## Long runs"):PERF.index("## GPU check")])
    assert "no slowdown" not in reading
    assert "undetermined by its own rule" in reading if trend["verdict"] == "undetermined" else trend["verdict"] in reading


# ---- numbers against their data --------------------------------------------------------------------------------


def _criterion_8() -> str:
    """Section 8's criterion on the sampled test accuracy (Holm over the two primary tests): >= +0.05 with Holm
    p < 0.05 "agrees"; significant and positive below it "agrees in direction, not in size"; Dr. GRPO
    significantly ahead "differs, opposite direction"; anything else "inconclusive"."""
    p = data("real_sign_vs_drgrpo_lr").pair("sampled test", "Sign", "DrGRPO")
    if p["holm"] >= 0.05:
        return "inconclusive"
    if p["diff"] < 0:
        return "differs, opposite direction"
    return "agrees" if p["diff"] >= 0.05 else "agrees in direction, not in size"


def test_section_8_reads_its_criterion_literally():
    criterion = (ROOT / "experiments" / "real_sign_vs_drgrpo_lr.yaml").read_text()
    assert all(w in criterion for w in ('"agrees"', '"agrees in direction, not in size"',
                                         '"differs, opposite direction"', "inconclusive"))
    reading = _criterion_8()
    assert _claim("Sign above Dr. GRPO at each arm's own").startswith(reading)
    assert f"**Ours: {reading}.**" in _section("## 8.", "## 9.")
    _, rows = table(DOC, "experiment | claim")
    status = _flat(next(r for r in rows if r[0] == "`real_sign_vs_drgrpo_lr`")[2])
    assert reading in status


def test_section_2c_prose_prints_its_data():
    real = data("real_sign_vs_drgrpo")
    section = _section("## 2c.", "## 2d.")
    lengths = [real.s("mean completion length at the last", a)["mean"] for a in ("Sign", "DrGRPO")]
    problems = _says(section, r"longer answers \(([\d.]+) against ([\d.]+) tokens", *lengths)
    ses = [s for c in real.metric("sampled test").cells + real.metric("greedy test").cells for s in c.se]
    problems += _says(section, r"test accuracy is ([\d.]+) to ([\d.]+)", min(ses), max(ses))
    assert not problems, problems


def test_the_compute_summary_counts_every_experiment():
    from lit_grpo.lab.grid import expand, expand_selection, standin_choice
    from lit_grpo.lab.loader import load_experiment
    from lit_grpo.lab.runner import prepared_outputs

    text = _flat(DOC[DOC.index("The whole suite:"):DOC.index("## 1.")])
    _, rows = table(DOC, "experiment | claim")
    suite = (*EXPERIMENTS, "search_agent_pilot")  # the pilot's status row is its own (it tests nothing)
    measured = [r[0].strip("`") for r in rows if r[0].strip("`") in suite]
    assert sorted(measured) == sorted(suite)
    problems = _says(text, r"the (\d+) experiments of the table", len(suite))
    walls = {n: data(n).runtime()[2] for n in ("degeneracy", "gradient_rank", "softmax_budget", "passk_crossing",
                                               "real_sign_vs_drgrpo", "sign_balance_skill")}  # fmt: skip
    printed = [float(x) for x in re.search(r"\(([\d. +]+) minutes\)", text).group(1).split(" + ")]
    assert sorted(walls.values()) == sorted(p for p in printed if p != 26), "the summed wall times are the table's"
    problems += _says(text, r"about ([\d.]+) hours for seven", sum(printed) / 60)
    rg = data("rg_sign_vs_drgrpo")
    problems += _says(text, r"rg_sign_vs_drgrpo's ([\d.]+) run-minutes", sum(rg.seconds()) / 60)
    agent = data("search_agent_estimators")
    select = [float(r["seconds"]) for r in _select_rows("search_agent_estimators", all_done=False)]
    problems += _says(text, r"search_agent_estimators' ([\d.]+) \+ ([\d.]+) run-minutes",
                      sum(agent.seconds()) / 60, sum(select) / 60)
    runs, prepare = 0, set()
    for name in suite:
        exp = load_experiment(ROOT / "experiments" / f"{name}.yaml", quick=True)
        prepared = prepared_outputs(exp, str(ROOT / "runs-never-written"))
        selection = expand_selection(exp, prepared, str(ROOT / "runs-never-written"))
        runs += len(selection) + len(expand(exp, prepared, str(ROOT / "runs-never-written"),
                                            standin_choice(exp, selection)))  # fmt: skip
        prepare |= set(prepared.values())  # one output per distinct prepare command: a shared one runs once
    problems += _says(text, r"plans (\d+) runs for the (\d+)", runs, len(suite))
    assert re.search(r"and three prepare steps", text) and len(prepare) == 3, prepare
    assert not problems, problems


def test_the_constant_answer_skills_come_from_their_script():
    result = constant_answer_skill.skills(constant_answer_skill.test_split())
    published = json.loads((RESULTS / "sign_balance_skill" / "constant_answers.json").read_text())
    assert published["skill"] == pytest.approx(result["skill"]) and published["chance"] == pytest.approx(result["chance"])
    skills = sorted(result["skill"].items(), key=lambda kv: -kv[1])
    section = _section("## 6.", "## 7.")
    assert "`scripts/constant_answer_skill.py`" in section
    problems = _says(section, r"right 1/k of the time \(([\d.]+) on the test split\)", result["chance"])
    problems += _says(section, r"the best constant answer, (\d), has skill ([+-][\d.]+); the others ([+-][\d.]+) to "
                      r"([+-][\d.]+)", skills[0][0], skills[0][1], skills[1][1], skills[-1][1])  # fmt: skip
    problems += _says(section, r"\(skill ([+-][\d.]+) at best\)", skills[0][1])
    assert not problems, problems


def test_the_bf16_rows_are_read_as_what_was_timed():
    rows = {(r["size"], r["precision"]): r for r in json.loads((RESULTS / "grpo_step.json").read_text())["compare"]}
    bf16 = {size: rows[size, "bf16"] for size in ("small", "medium")}
    text = _flat(PERF[PERF.index("**bf16 on this CPU.**"):PERF.index("## ", PERF.index("**bf16 on this CPU.**"))])
    assert "saves nothing" not in text and "saves a sixth" not in text
    if all(r["lit"]["steps_timed"] == 1 for r in bf16.values()):
        assert "each bf16 figure is one timed step of one process" in text
    if bf16["medium"]["warmup"] == 0:
        assert "`medium` 1.386 s against 1.321, with no warm-up step" in text
    fp32 = [rows[size, "fp32"]["lit"]["steps_timed"] for size in ("small", "medium")]
    problems = _says(text, r"fp32 medians over (\d+) and (\d+) timed steps", *fp32)
    problems += _says(text, r"`small` ([\d.]+) s against fp32's ([\d.]+)", bf16["small"]["lit"]["step_s"],
                      rows["small", "fp32"]["lit"]["step_s"])  # fmt: skip
    assert not problems, problems


def test_the_lora_headline_states_its_step_time_ratio():
    """The LoRA sentence quotes both paired estimates, the completion lengths, and each target's verdict (every
    pair at 4x or more) as the data give it."""
    from bench.grpo_step.report import paired_ratio

    lora = next(r for r in json.loads((RESULTS / "grpo_step_realistic.json").read_text())["realistic"]
                if r["workload"] == "lora")  # fmt: skip
    gm, (low, high) = paired_ratio(lora["pair_ratios"])
    step_gm, (step_low, step_high) = paired_ratio(lora["pair_step_ratios"])
    prose = _flat(PERF[PERF.index("The LoRA workload "):][:400])
    verdict = {True: "meets", False: "misses"}
    tokens_met, step_met = verdict[min(lora["pair_ratios"]) >= 4], verdict[min(lora["pair_step_ratios"]) >= 4]
    problems = _says(prose, rf"The LoRA workload {tokens_met} its 4x by tokens/s \(paired ([\d.]+)x \[([\d.]+), "
                     rf"([\d.]+)\]\) and {step_met} it by step time \(paired ([\d.]+)x \[([\d.]+), ([\d.]+)\]\)",
                     gm, low, high, step_gm, step_low, step_high)  # fmt: skip
    problems += _says(prose, r"longer completions \((\d+) against (\d+) completion tokens a step\)",
                      round(lora["lit"]["tokens"]), round(lora["trl"]["tokens"]))  # fmt: skip
    assert not problems, problems
    assert (lora["lit"]["tokens"] > lora["trl"]["tokens"]) == ("lit-grpo's trajectory samples longer" in prose)
    assert math.isclose(statistics.fmean([math.log(r) for r in lora["pair_ratios"]]), math.log(gm))


def test_the_fp32_ratios_are_quoted_with_their_paired_intervals():
    from bench.grpo_step.report import paired_ratio

    rows = {(r["size"], r["precision"]): r for r in json.loads((RESULTS / "grpo_step.json").read_text())["compare"]}
    values = [v for size in ("small", "medium") for gm, ci in [paired_ratio(rows[size, "fp32"]["pair_ratios"])]
              for v in (gm, *ci)]  # fmt: skip
    problems = _says(_flat(PERF), r"\(paired over the A/B pairs: ([\d.]+)x \[([\d.]+), ([\d.]+)\] and ([\d.]+)x "
                     r"\[([\d.]+), ([\d.]+)\]", *values)  # fmt: skip
    assert not problems, problems


def test_the_readme_states_each_studys_power_from_its_data():
    """The README's power figures: the three SmolLM2 Sign − Dr. GRPO studies' (after the data: the paired t at
    0.05 against a true +0.05, at the sd of their seeds' sampled-accuracy differences) and the search-agent
    study's (before it: the pilot's sd at its 5 seeds and Holm's first step)."""
    from lit_grpo.lab.stats import summarize, t_test_power
    from tests.docs.doc_tables import Pct
    from tests.docs.test_results_tables import _pilot_sd

    readme = " ".join((ROOT / "README.md").read_text().split())
    powers = []
    for name in ("real_sign_vs_drgrpo", "rg_sign_vs_drgrpo", "real_sign_vs_drgrpo_lr"):
        d = data(name)
        diffs = [a - b for a, b in zip(d.values("sampled test", "Sign"), d.values("sampled test", "DrGRPO"),
                                       strict=True)]
        powers.append(Pct(t_test_power(len(diffs), 0.05, summarize(diffs)["sd"], 0.05)))
    problems = _says(readme, r"studies had (\d+)%, (\d+)% and (\d+)% power", *powers)
    agent = data("search_agent_estimators")
    problems += _says(readme, r"inconclusive: (\d+) seeds, (\d+)% power at its \+0.05 margin",
                      len(agent.values("greedy test", "GRPO")), Pct(t_test_power(5, 0.05, _pilot_sd(), 0.05 / agent.family)))
    assert not problems, problems
