"""Every table of docs/results.md against its committed data, at the digits it prints.

Each experiment's statistics are recomputed from its ``docs/results/<name>/runs.csv`` with the functions
``lit-grpo compare`` writes its report with (``analyse``, ``summarize``); section 7's come from the fidelity
CSVs. A table's rows are read structurally (label cells, then every number of the other cells in order) and
each row is mapped below to the list of data values it prints (``None``: a number that is no measurement, such
as a margin or a config's size). A doc edit that changes a number, a row without a mapping, or a data change
that moves a printed digit fails the test. The published reports are checked to be their runs.csv rebuilt, so
the doc, the reports and the data cannot drift apart."""

from __future__ import annotations

import copy
import csv
import functools
import math
import random
import re
import statistics
from pathlib import Path

import numpy
import pytest

from lit_grpo.lab.loader import load_experiment
from lit_grpo.lab.results_csv import read_runs_csv
from lit_grpo.lab.stats import summarize
from lit_grpo.lab.tables import analyse, crossing_section, family_section, metric_section
from tests.docs.doc_tables import Pct, mismatches, numbers, table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
DOC = (ROOT / "docs" / "results.md").read_text()

#: the experiments docs/results.md quotes (each with runs.csv and report.md under docs/results/<name>/)
EXPERIMENTS = ("degeneracy", "sign_vs_drgrpo", "sign_starvation", "real_sign_vs_drgrpo", "softmax_budget",
               "gradient_rank", "passk_crossing", "sign_balance_skill", "rg_sign_vs_drgrpo", "real_sign_vs_drgrpo_lr",
               "search_agent_estimators")


class Data:
    """One experiment's runs.csv, analysed as the compare tool's report analyses it."""

    def __init__(self, name: str):
        self.name = name
        self.exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
        self.records = read_runs_csv(self.exp, RESULTS / name / "runs.csv")
        self.analysis = analyse(self.exp, self.records)

    def metric(self, key: str):
        found = [mt for mt in self.analysis.metrics if mt.metric.key.startswith(key)]
        assert len(found) == 1, f"{self.name}: {len(found)} metrics start with {key!r}"
        return found[0]

    def cell(self, key: str, arm: str, setting: str = "default"):
        return next(c for c in self.metric(key).cells if c.arm == arm and c.setting == setting)

    def chosen_lr(self, arm: str) -> float:
        """The learning rate the selection stage chose for ``arm`` (as its final runs record it)."""
        cell = next(c for c in self.analysis.metrics[0].cells if c.arm == arm)
        return float(cell.chosen.split("=")[1])

    def values(self, key: str, arm: str, setting: str = "default") -> list[float]:
        return self.cell(key, arm, setting).values

    def s(self, key: str, arm: str, setting: str = "default") -> dict[str, float]:
        """The summary row of the report: n, mean, sd, ci_low, ci_high."""
        return summarize(self.values(key, arm, setting))

    def mci(self, key: str, arm: str, setting: str = "default") -> list[float]:
        s = self.s(key, arm, setting)
        return [s["mean"], s["ci_low"], s["ci_high"]]

    def pair(self, key: str, a: str, b: str, setting: str = "default") -> dict[str, float]:
        """The report's paired test of a against b (Holm and BH where in the family), with the 95% paired t
        interval of a − b."""
        for x, y, r in self.metric(key).pairs:
            if x.setting == y.setting == setting and {x.arm, y.arm} == {a, b}:
                flip, test = x.arm != a, r
                break
        else:
            raise AssertionError(f"{self.name}: no pair {a} - {b} of {key!r} at {setting}")
        va, vb = (y, x) if flip else (x, y)
        by = dict(zip(vb.seeds, vb.values, strict=True))  # paired by seed: a failed run leaves its pair out
        d = summarize([u - by[seed] for seed, u in zip(va.seeds, va.values, strict=True) if seed in by])
        return {**test, "diff": d["mean"], "lo": d["ci_low"], "hi": d["ci_high"],
                "ahead": test["n"] - test["ahead"] if flip else test["ahead"]}  # fmt: skip

    def one_sample(self, key: str, arm: str, setting: str = "default") -> dict[str, float]:
        return next(r for c, r in self.metric(key).one_sample if c.arm == arm and c.setting == setting)

    def tost(self, key: str, arm: str, setting: str = "default") -> dict[str, float]:
        return next(r for c, r in self.metric(key).tost if c.arm == arm and c.setting == setting)

    def pooled(self, key: str, pool: str) -> dict:
        return next(r for r in self.metric(key).pooled if r["pool"] == pool)

    def interaction(self, key: str, axis: str) -> dict:
        return next(r for r in self.metric(key).anova if r["axis"] == axis)

    @property
    def family(self) -> int:
        return self.analysis.family_size

    def runtime(self) -> tuple[int, int, float]:
        """From the published report: runs in all, runs of the timed invocation, its wall minutes."""
        report = (RESULTS / self.name / "report.md").read_text()
        runs = int(re.search(r"^- runs: (\d+)", report, re.M).group(1))
        timed, wall = re.search(r"(\d+) runs in ([\d.]+) min wall time", report).groups()
        return runs, int(timed), float(wall)

    def seconds(self) -> list[float]:
        return [r.seconds for r in self.records if r.status == "done"]


@functools.cache
def data(name: str) -> Data:
    return Data(name)


def _fidelity(name: str) -> tuple[dict[tuple[str, str, str], dict[str, float]], list[dict[str, str]]]:
    bins = {(r["estimator"], r["objective"], r["bin"]): {k: float(v) for k, v in r.items() if k in ("cos", "norm_ratio", "snr", "prompts")}
            for r in csv.DictReader(open(RESULTS / name / "bins.csv"))}  # fmt: skip
    return bins, list(csv.DictReader(open(RESULTS / name / "prompts.csv")))


def _within(prompts: list[dict[str, str]], min_correct: int = 0) -> Pct:
    """The largest relative distance of a measured omega from the i.i.d. curve omega(p)."""
    return Pct(max(abs(float(r["omega"]) / float(r["omega_predicted"]) - 1) for r in prompts
                   if int(r["correct"]) >= min_correct))  # fmt: skip


# ---- the mapping: each table's rows, keyed by the start of their first cell, to the values they print ---------


def claims() -> dict[str, list]:
    """The "Claims at a glance" table: the ours, statistics and verdict columns (the paper's are not ours)."""
    deg, svd, st, real = data("degeneracy"), data("sign_vs_drgrpo"), data("sign_starvation"), data("real_sign_vs_drgrpo")
    sm, gr, pk, sb = data("softmax_budget"), data("gradient_rank"), data("passk_crossing"), data("sign_balance_skill")
    acc4, unb = "sampled test accuracy after training (4 samples", "observed D minus the unbiased"
    excess = deg.s("rollout/degenerate_excess (mean)", "GRPO")
    stable = [svd.pair(acc4, "Sign", "NormDrGRPO", f"lr={lr},policy={p}") for lr in ("5e-5", "1e-4") for p in ("weak", "strong")]
    at3 = {p: svd.pair(acc4, "Sign", "NormDrGRPO", f"lr=3e-4,policy={p}") for p in ("weak", "strong")}
    sign_3e4 = svd.values(acc4, "Sign", "lr=3e-4,policy=weak")
    st_pair, ablation = st.pair(acc4, "Sign", "DrGRPO"), st.pair(acc4, "Sign-zero-all-wrong", "Sign")
    sampled, greedy = real.pair("sampled test", "Sign", "DrGRPO"), real.pair("greedy test", "Sign", "DrGRPO")
    exact, sm_acc = sm.pair("budget/exact_share_0.0-0.2", "SoftmaxGRPO-tau0.1", "GRPO"), sm.pair(acc4, "SoftmaxGRPO-tau0.1", "GRPO")
    p1 = [f"G={g},P=1" for g in (2, 4, 8)]
    tost_holm = [gr.tost(k, "GRPO", s)["holm"] for k in ("grad/erank", "grad/dedup_erank") for s in p1]
    arms5 = ("Sign", "GRPO", "DrGRPO")
    crossed = {arm: _crossing(arm)[0] for arm in arms5}
    skill, entropy = sb.pair("test skill after", "SignBalance", "GRPO"), sb.pair("entropy of the sampled test answers after", "SignBalance", "GRPO")
    ratio = {arm: _entropy_ratios(arm) for arm in ("GRPO", "SignBalance")}
    tiny, real7 = _fidelity("fidelity")[1], _fidelity("fidelity_real")[1]
    return {
        "degenerate share": [
            deg.s("rollout/degenerate_frac", "GRPO")["mean"], excess["mean"], excess["ci_low"], excess["ci_high"],
            deg.s(unb, "GRPO")["mean"], deg.metric(unb).metric.equivalence[1],
            excess["n"], deg.family, deg.one_sample("rollout/degenerate_excess (mean)", "GRPO")["holm"],
            deg.tost(unb, "GRPO")["holm"],
            None],  # "(1 − p)^G"
        "Sign above normalised Dr. GRPO": [
            min(p["diff"] for p in stable), max(p["diff"] for p in stable), None, None,
            svd.pooled(acc4, "lr=5e-5")["diff"], svd.pooled(acc4, "lr=1e-4")["diff"], None,
            at3["weak"]["diff"], sum(v < 0.05 for v in sign_3e4), len(sign_3e4), at3["strong"]["diff"],  # collapse: below 0.05
            len(sign_3e4), None, svd.family, min(p["holm"] for p in [*stable, *at3.values()]),
            svd.pooled(acc4, "lr=5e-5")["holm"], svd.pooled(acc4, "lr=1e-4")["holm"], svd.interaction(acc4, "lr")["holm"]],
        "Sign above Dr. GRPO where most groups": [
            st_pair["diff"], st_pair["lo"], st_pair["hi"], Pct(st.s("share of all-wrong groups at the first", "Sign")["mean"]),
            st_pair["n"], None, st.family,
            None, None, ablation["diff"], ablation["lo"], ablation["hi"], ablation["holm"]],
        "Sign above Dr. GRPO on a pretrained": [
            sampled["diff"], sampled["lo"], sampled["hi"], greedy["diff"], greedy["lo"], greedy["hi"], None,
            Pct(real.s("share of all-wrong groups at the first", "Sign")["mean"]),
            sampled["n"], None, real.family, sampled["holm"]],
        "Sign above Dr. GRPO on a reasoning-gym task": _rg_claim(),
        "Sign above Dr. GRPO at each arm's own": _lr_claim(),
        "SoftmaxGRPO moves the budget": [
            None, sm.s("budget/exact_share_0.0-0.2", "SoftmaxGRPO-tau0.1")["mean"],
            sm.s("budget/exact_share_0.0-0.2", "GRPO")["mean"], exact["diff"], exact["lo"], exact["hi"],
            sm_acc["diff"], sm_acc["lo"], sm_acc["hi"],
            exact["n"], None, sm.family, exact["holm"], sm_acc["holm"]],
        "gradient effective rank": [
            *[gr.s("grad/erank", "GRPO", s)["mean"] for s in p1], None, None, None,
            *[gr.s("grad/dedup_erank", "GRPO", s)["mean"] for s in p1],
            gr.metric("grad/erank").metric.equivalence[1], len(gr.values("grad/erank", "GRPO", p1[0])), gr.family,
            min(tost_holm), max(tost_holm),
            None, *[v for s in p1[1:] for v in (_measured_rows(s), int(s[2]))]],
        "search compression": [
            *[pk.s("gain in pass@1 ", arm)["mean"] for arm in arms5], *[pk.s("gain in pass@256", arm)["mean"] for arm in arms5],
            *crossed.values(), len(pk.values("gain in pass@1 ", "Sign")),
            len(pk.values("gain in pass@1 ", "Sign")), None, None, pk.family,
            None, None, pk.s("gain in pass@256", "GRPO")["mean"], pk.s("gain in pass@256", "DrGRPO")["mean"], None],
        "SignBalance reaches more skill": [
            skill["diff"], skill["lo"], skill["hi"], sb.s("test skill after", "SignBalance")["mean"],
            sb.s("test skill after", "GRPO")["mean"], sb.s("test skill of the starting", "GRPO")["mean"],
            Pct(statistics.mean(ratio["SignBalance"])), Pct(statistics.mean(ratio["GRPO"])),
            Pct(sb.s("share of the most common", "SignBalance")["mean"]), Pct(sb.s("share of the most common", "GRPO")["mean"]),
            skill["n"], None, sb.family, skill["holm"], entropy["holm"],
            None],  # the criterion's +0.03
        "SignBalance above GRPO, Dr. GRPO and Sign on a search agent": _agent_claim(),
        "each estimator's mean update": [
            _within(tiny), _within(real7, 8), len({r["prompt"] for r in real7 if int(r["correct"]) >= 8}),
            len({r["prompt"] for r in real7}),
            len(tiny), len(real7), None, None],  # the Holm families: every prompt x estimator pair; "1 correct in 256"
    }


def _rg_claim() -> list:
    rg = data("rg_sign_vs_drgrpo")
    sampled, greedy = rg.pair("sampled test", "Sign", "DrGRPO"), rg.pair("greedy test", "Sign", "DrGRPO")
    return [sampled["diff"], sampled["lo"], sampled["hi"], greedy["diff"], greedy["lo"], greedy["hi"], None,  # 12 steps
            Pct(rg.s("share of all-wrong groups at the first", "Sign")["mean"]),
            sampled["n"], None, rg.family, sampled["holm"], greedy["holm"],  # None: the 1000-prompt split
            None, sampled["n"] - sampled["ahead"], greedy["n"] - greedy["ahead"]]  # None: the criterion's +0.05


def _lr_claim() -> list:
    d = data("real_sign_vs_drgrpo_lr")
    sampled, greedy = d.pair("sampled test", "Sign", "DrGRPO"), d.pair("greedy test", "Sign", "DrGRPO")
    return [sampled["diff"], sampled["lo"], sampled["hi"], greedy["diff"], greedy["lo"], greedy["hi"],
            d.chosen_lr("Sign"), None, None, None,  # the grid
            sampled["n"], 0, 3, None, d.family, sampled["holm"], greedy["holm"],  # seeds 0 to 3; the 1000-prompt split
            None, sampled["n"] - sampled["ahead"]]  # None: the criterion's +0.05


def _lr_status() -> list:
    d = data("real_sign_vs_drgrpo_lr")
    p, (runs, timed, wall) = d.pair("sampled test", "Sign", "DrGRPO"), d.runtime()
    select = [float(r["seconds"]) for r in _select_rows("real_sign_vs_drgrpo_lr")]
    assert runs == timed
    return [None, d.chosen_lr("Sign"), None, None, None, p["diff"], p["lo"], p["hi"], p["holm"], len(select), runs,  # "section 8"
            wall, min(d.seconds()), max(d.seconds()), None,  # 2 at a time
            sum(select) / 60, min(select), max(select)]


def _crossing(arm: str) -> tuple[int, list[float]]:
    """As the report's crossing table computes them: the runs whose trained pass@k curve fell to the start's,
    the k of each crossing and their median (the doc prints no number for a run that never crossed)."""
    from lit_grpo.lab.compute import curve_crossing
    from lit_grpo.lab.spec import Metric

    pk = data("passk_crossing")
    profile = next(p for p in pk.exp.profiles if p.baseline)
    how = profile.reduces[-1]
    runs = [r for r in pk.records if r.run.arm == arm and r.status == "done"]
    cross = [curve_crossing(list(profile.x), [r.values[Metric(m, how).key] - r.values[Metric(b, how).key]
                                              for m, b in zip(profile.metrics, profile.baseline, strict=True)],
                            profile.log2) for r in runs]  # fmt: skip
    crossed = [c for c in cross if c == c]
    median = [sorted(crossed)[len(crossed) // 2]] if len(crossed) == len(cross) else []
    return len(crossed), crossed + median


def _measured_rows(setting: str) -> float:
    """Distinct rows of a measured step (15 measurements a run; an all-zero matrix logs 0 rows and is counted
    in ``measurements skipped``): mean x 15 / (15 - skipped), averaged over the runs."""
    gr = data("gradient_rank")
    rows = gr.values("rows after de-duplication", "GRPO", setting)
    skipped = gr.values("measurements skipped", "GRPO", setting)
    return statistics.mean(r * 15 / (15 - k) for r, k in zip(rows, skipped, strict=True))


def _entropy_ratios(arm: str) -> list[float]:
    sb = data("sign_balance_skill")
    after = sb.values("entropy of the sampled test answers after", arm)
    start = sb.values("entropy of the sampled test answers of the starting", arm)
    return [a / s for a, s in zip(after, start, strict=True)]


def status() -> dict[str, list]:
    """The table of measured status and runtimes: numbers of the status, runs and wall time columns (wall
    times from the published reports' Runtime sections, run seconds from runs.csv)."""
    acc4 = "sampled test accuracy after training (4 samples"
    svd, st, real = data("sign_vs_drgrpo"), data("sign_starvation"), data("real_sign_vs_drgrpo")
    stable = [svd.pair(acc4, "Sign", "NormDrGRPO", f"lr={lr},policy={p}") for lr in ("5e-5", "1e-4") for p in ("weak", "strong")]
    st_pair, real_pair = st.pair(acc4, "Sign", "DrGRPO"), real.pair("sampled test", "Sign", "DrGRPO")
    selection = len(_select_rows("sign_starvation"))

    def timed(name: str) -> list[float]:
        runs, _, wall = data(name).runtime()
        return [runs, wall]

    svd_runs, svd_timed, svd_wall = svd.runtime()
    return {
        "`degeneracy`": [None, *timed("degeneracy")],
        "`gradient_rank`": [None, *timed("gradient_rank")],
        "`sign_vs_drgrpo`": [None, min(p["diff"] for p in stable), max(p["diff"] for p in stable), svd_runs,
                             None, svd_wall, svd_timed, statistics.mean(svd.seconds())],  # about 26: the estimate
        "`softmax_budget`": [None, *timed("softmax_budget")],
        "`sign_starvation`": [st_pair["diff"], st_pair["lo"], st_pair["hi"], st_pair["holm"], selection,
                              len(st.records), min(st.seconds()), statistics.median(st.seconds()), None, None],
        "`real_sign_vs_drgrpo`": [real_pair["diff"], real_pair["lo"], real_pair["hi"], real_pair["holm"],
                                  *timed("real_sign_vs_drgrpo"), min(real.seconds()), max(real.seconds()), None],
        "`sign_balance_skill`": [None, data("sign_balance_skill").pair(
            "test skill after", "SignBalance", "GRPO")["diff"], data("sign_balance_skill").runtime()[0],
            data("sign_balance_skill").runtime()[2]],
        "`passk_crossing`": [None, None, data("passk_crossing").s("gain in pass@256", "GRPO")["mean"],
                             *timed("passk_crossing")],
        "`rg_sign_vs_drgrpo`": _rg_status(),
        "`real_sign_vs_drgrpo_lr`": _lr_status(),
        "`search_agent_pilot`": _pilot_status(),
        "`search_agent_estimators`": _agent_status(),
        "`lit-grpo fidelity`": [len({r["prompt"] for r in _fidelity("fidelity")[1]}),
                                len({r["prompt"] for r in _fidelity("fidelity_real")[1]}), None],
    }


def _pilot_status() -> list:
    """The pilot's per-seed SignBalance − GRPO differences, their sd, its runs and their mean seconds."""
    with (RESULTS / "search_agent_pilot" / "runs.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "done"]
    acc = "greedy validation accuracy after training (100 questions)"
    by = {(r["arm"], r["seed"]): float(r[acc]) for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    diffs = [by["SignBalance", s] - by["GRPO", s] for s in seeds]
    return [None, *diffs, len(seeds), statistics.stdev(diffs), len(rows),
            statistics.mean(float(r["seconds"]) for r in rows), None]


# ---- section 9: the search-agent study --------------------------------------------------------------------------

AGENT, AGENT_ACC = "search_agent_estimators", "greedy test accuracy"
AGENT_ARMS = {"GRPO": "GRPO", "Dr. GRPO": "DrGRPO", "Sign": "Sign", "SignBalance": "SignBalance"}  # doc -> arm


def _pilot_sd() -> float:
    """The sd of the pilot's SignBalance − GRPO differences, which the study's registered power came from."""
    return _pilot_status()[5]


def _agent_pairs() -> dict[str, dict[str, float]]:
    d = data(AGENT)
    return {doc: d.pair(AGENT_ACC, "SignBalance", arm) for doc, arm in AGENT_ARMS.items() if arm != "SignBalance"}


def _agent_selection() -> dict[tuple[str, str], float | None]:
    """The selection runs' validation accuracy per (arm, rate); None where the run failed."""
    rows = _select_rows(AGENT, all_done=False)  # Dr. GRPO's run at 1e-3 failed
    return {(r["arm"], r["setting"].split("=")[1]): float(r["val/accuracy (last)"]) if r["status"] == "done" else None
            for r in rows}


def _guess_share() -> float:
    d = data(AGENT)
    return max(d.s("share of episodes answered correctly by a guess", a)["mean"] for a in AGENT_ARMS.values())


def _agent_claim() -> list:
    from lit_grpo.lab.stats import t_test_power

    d, pairs = data(AGENT), _agent_pairs()
    ours = [v for p in pairs.values() for v in (p["diff"], p["lo"], p["hi"])]
    power = t_test_power(5, 0.05, _pilot_sd(), 0.05 / d.family)  # as registered: the pilot's sd at 5 seeds
    collapsed = sum(v == 0 for v in d.values(AGENT_ACC, "GRPO"))
    return [*ours, None, Pct(_guess_share()),  # None: the 150 test questions
            pairs["GRPO"]["n"], pairs["Sign"]["n"], d.family, max(p["holm"] for p in pairs.values()),
            Pct(power), None, collapsed, len(d.values(AGENT_ACC, "GRPO"))]  # None: the criterion's +0.05


def _agent_status() -> list:
    d, p = data(AGENT), _agent_pairs()["GRPO"]
    runs, timed, wall = d.runtime()
    select = [float(r["seconds"]) for r in _select_rows(AGENT, all_done=False)]
    significant = sum(q["holm"] < 0.05 for q in _agent_pairs().values())
    return [None, p["diff"], p["lo"], p["hi"], p["holm"], significant, d.family, len(select), runs,  # "section 9"
            sum(d.seconds()) / 60, min(d.seconds()), max(d.seconds()), None, timed, wall, sum(select) / 60]


def agent_selection() -> dict[str, list]:
    sel, d = _agent_selection(), data(AGENT)
    return {doc: [v for lr in ("3e-4", "1e-3") if (v := sel[arm, lr]) is not None] + [d.chosen_lr(arm)]
            for doc, arm in AGENT_ARMS.items()}


def agent_final() -> dict[str, list]:
    d = data(AGENT)
    out = {}
    for doc, arm in AGENT_ARMS.items():
        s = d.s(AGENT_ACC, arm)
        out[doc] = [d.chosen_lr(arm), *d.values(AGENT_ACC, arm), s["mean"], s["sd"]]
    return out


def agent_pairs() -> dict[str, list]:
    return {doc: [p["n"], p["diff"], p["lo"], p["hi"], p["ahead"], p["p_t"], p["holm"]]
            for doc, p in _agent_pairs().items()}


#: The secondary table's rows, each the start of its metric's label in the experiment
AGENT_SECONDARY = ("tool calls per episode", "share of episodes answered correctly by a guess",
                   "share of correct answers that were guesses", "mean advantage of a correct found answer",
                   "share of episodes whose searches returned", "policy tokens per episode",
                   "training reward over the 8 steps")


def agent_secondary() -> dict[str, list]:
    d = data(AGENT)
    out = {}
    for key in AGENT_SECONDARY:
        p = d.pair(key, "SignBalance", "GRPO")
        out[key] = [*[d.s(key, arm)["mean"] for arm in AGENT_ARMS.values()], p["diff"], p["p_t"]]
    return out


def test_the_agents_guide_quotes_the_turn_shares_of_the_search_agent_study():
    d = data(AGENT)
    text = " ".join((ROOT / "docs" / "agents.md").read_text().split())
    found = re.search(r"([\d.]+) to ([\d.]+) of the advantage mass landed on the first turn and ([\d.]+) to "
                      r"([\d.]+) on the final one", text)
    assert found, "docs/agents.md quotes the search agent's turn shares"
    means = {k: [d.s(k, arm)["mean"] for arm in AGENT_ARMS.values()]
             for k in ("share of the advantage mass on the first", "share of the advantage mass on the final")}
    expected = [f(v) for v in means.values() for f in (min, max)]
    problems = mismatches(list(found.groups()), expected, "docs/agents.md turn shares")
    assert not problems, problems


def test_the_rft_registration_is_sized_from_the_search_agent_studys_data():
    """Section 10 and experiments/search_agent_rft.yaml: the power at the pilot's spread (one test, 5 seeds) and
    the compute budget from section 9's finished runs (4 selection runs and 10 final runs, 2 at a time)."""
    from lit_grpo.lab.stats import t_test_power

    d = data(AGENT)
    select = [float(r["seconds"]) for r in _select_rows(AGENT, all_done=False) if r["status"] == "done"]
    final = d.seconds()
    minutes = (4 * statistics.mean(select) + 10 * statistics.mean(final)) / 60
    section = " ".join(DOC[DOC.index("## 10."):].split())
    header = " ".join(line.lstrip("# ") for line in (ROOT / "experiments" / "search_agent_rft.yaml").read_text().splitlines())
    problems = []
    for text, where in ((section, "section 10"), (header, "search_agent_rft.yaml")):
        found = re.search(r"(\d+%) at the \+0.05 margin", text) or re.search(r"has (\d+%) power at the \+0.05", text)
        budget = re.search(r"about (\d+) run-minutes, ([\d.]+) hours wall", text)
        assert found and budget, where
        problems += mismatches([*found.groups(), *budget.groups()],
                               [Pct(t_test_power(5, 0.05, _pilot_sd(), 0.05)), minutes, minutes / 2 / 60], where)
    for found in re.finditer(r"(\d+) s a selection run, (\d+) s a final run on average", header):  # header, runtime
        problems += mismatches(list(found.groups()), [statistics.mean(select), statistics.mean(final)], "header")
    assert len(re.findall(r"s a final run on average", header)) == 2
    assert not problems, problems


def test_the_search_agent_section_reads_its_prose_from_the_data():
    from lit_grpo.lab.stats import t_test_power

    d = data(AGENT)
    section = " ".join(DOC[DOC.index("## 9."):].replace("−", "-").split())

    def says(pattern: str, *values) -> list[str]:
        found = re.search(pattern, section)
        return [f"no {pattern!r}"] if found is None else mismatches(list(found.groups()), list(values), pattern)

    sel, pairs, arms = _agent_selection(), _agent_pairs(), list(AGENT_ARMS.values())
    assert sel["DrGRPO", "1e-3"] is None and d.chosen_lr("DrGRPO") == 3e-4, "Dr. GRPO's run at 1e-3 failed"
    problems = says(r"GRPO's \(([\d.]+) against ([\d.]+)\)", sel["GRPO", "1e-3"], sel["GRPO", "3e-4"])
    grpo = dict(zip(d.cell(AGENT_ACC, "GRPO").seeds, d.values(AGENT_ACC, "GRPO"), strict=True))
    runs = {(r.run.arm, r.run.seed): r for r in d.records}
    assert grpo[1] == 0 and runs["GRPO", 1].values[d.metric("greedy validation").metric.key] == 0
    assert runs["Sign", 1].status != "done" and len(d.values(AGENT_ACC, "Sign")) == 4
    problems += says(r"mean training reward of ([\d.]+) over its 8 steps",
                     runs["GRPO", 1].values[d.metric("training reward over").metric.key])
    ses = [s for c in d.metric(AGENT_ACC).cells for s in c.se]
    problems += says(r"prompt-sampling SE on 150 questions is at most ([\d.]+)", max(ses))
    assert all(p["holm"] >= 0.05 for p in pairs.values()), "the section reads every comparison as inconclusive"
    problems += says(r"The study had (\d+)% power at the \+0.05 margin as registered",
                     Pct(t_test_power(5, 0.05, _pilot_sd(), 0.05 / d.family)))
    problems += says(r"Holm-adjusted p ([\d.]+) for each; the smallest unadjusted p is ([\d.]+)",
                     max(p["holm"] for p in pairs.values()), min(p["p_t"] for p in pairs.values()))

    def sd(arm: str) -> float:
        other = dict(zip(d.cell(AGENT_ACC, arm).seeds, d.values(AGENT_ACC, arm), strict=True))
        sb = zip(d.cell(AGENT_ACC, "SignBalance").seeds, d.values(AGENT_ACC, "SignBalance"), strict=True)
        return statistics.stdev(v - other[seed] for seed, v in sb if seed in other)

    problems += says(r"differences is ([\d.]+) \(the pilot's ([\d.]+)\), most of it GRPO's collapsed seed, against "
                     r"([\d.]+) for Dr. GRPO and ([\d.]+) for Sign", sd("GRPO"), _pilot_sd(), sd("DrGRPO"), sd("Sign"))
    turns, calls = d.metric("assistant turns").metric.key, d.metric("tool calls").metric.key
    assert all(r.values[turns] == 1 + r.values[calls] for r in d.records if r.status == "done")
    guess = [d.s("share of correct answers that were guesses", a)["mean"] for a in arms]
    problems += says(r"at most ([\d.]+)% of an arm's training episodes and ([\d.]+)% of its correct answers",
                     Pct(_guess_share()), Pct(max(guess)))
    assert all(v == 0 for a in arms for v in d.values("share of episodes correct with no search", a))
    with_guess = {a: len(d.values("mean advantage of a correct guess", a)) for a in arms}
    problems += says(r"exists only in the (\d+) final runs that had one \((\d+) GRPO, (\d+) Dr. GRPO, (\d+) "
                     r"SignBalance\)", sum(with_guess.values()), with_guess["GRPO"], with_guess["DrGRPO"],
                     with_guess["SignBalance"])
    assert with_guess["Sign"] == 0 and set(d.values("mean advantage of a correct found answer", "Sign")) == {1.0}
    rows = _select_rows(AGENT, all_done=False)
    select = [float(r["seconds"]) for r in rows]
    done = [float(r["seconds"]) for r in rows if r["status"] == "done"]
    _, timed, wall = d.runtime()
    problems += says(r"the (\d+) finished final runs took ([\d.]+) run-minutes \((\d+) to (\d+) s a run",
                     len(d.seconds()), sum(d.seconds()) / 60, min(d.seconds()), max(d.seconds()))
    problems += says(r"the last (\d+) of them in ([\d.]+) min wall; the (\d+) selection runs took ([\d.]+) "
                     r"run-minutes as recorded \((\d+) to (\d+) s a finished run\)", timed, wall, len(select),
                     sum(select) / 60, min(done), max(done))
    total = (sum(d.seconds()) + sum(select)) / 60
    problems += says(r"its (\d+) run-minutes at 2 at a time are about ([\d.]+) hours", total, total / 2 / 60)
    assert not problems, "docs/results.md section 9 differs from its data:\n" + "\n".join(problems)


def _rg_status() -> list:
    rg = data("rg_sign_vs_drgrpo")
    p, (runs, timed, wall) = rg.pair("sampled test", "Sign", "DrGRPO"), rg.runtime()
    report = (RESULTS / "rg_sign_vs_drgrpo" / "report.md").read_text()
    total = float(re.search(r"run time: ([\d.]+) min in all", report).group(1))
    assert total == pytest.approx(sum(rg.seconds()) / 60, abs=0.05)
    return [p["diff"], p["lo"], p["hi"], p["holm"], runs, total, min(rg.seconds()), max(rg.seconds()),
            None, timed, wall, None, None]  # None: 2 at a time; "the first 6"; the 62-minute pause


def sign_against_drgrpo_six(name: str) -> dict[str, list]:
    """The per-seed table of sections 2d and 8: section 2c's rows and the share of all-wrong groups."""
    rows = sign_against_drgrpo(name)
    return {**rows, "share of all-wrong groups over the 12 steps": [None, *_sign_drgrpo_row(
        name, "share of all-wrong groups over", False)]}


def test_the_reasoning_gym_section_reads_its_prose_from_the_data():
    rg = data("rg_sign_vs_drgrpo")
    section = DOC[DOC.index("## 2d."):DOC.index("## 3.")].replace("−", "-")
    mean = {k: rg.s(k, arm)["mean"] for k, arm in (("training reward at the first", "Sign"),
                                                   ("share of all-wrong groups at the first", "Sign"))}
    assert rg.values("training reward at the first", "Sign") == rg.values("training reward at the first", "DrGRPO")
    problems = mismatches(list(re.search(r"was ([\d.]+) on average\nover the (\d+) seeds, and (\d+)% of the groups",
                                         section).groups()),
                          [mean["training reward at the first"], rg.s("sampled test", "Sign")["n"],
                           Pct(mean["share of all-wrong groups at the first"])], "start")
    problems += mismatches(list(re.search(r"(\d+)% of Sign's groups\nstayed all wrong against (\d+)% of", section).groups()),
                           [Pct(rg.s("share of all-wrong groups over", a)["mean"]) for a in ("Sign", "DrGRPO")], "over")
    ses = [s for c in rg.metric("sampled test").cells + rg.metric("greedy test").cells for s in c.se]
    problems += mismatches(list(re.search(r"test accuracy is ([\d.]+) to ([\d.]+)", section).groups()),
                           [min(ses), max(ses)], "SE")
    lengths = [rg.s("mean completion length at the last", a)["mean"] for a in ("Sign", "DrGRPO")]
    problems += mismatches(list(re.search(r"\((\d+) against (\d+) tokens", section).groups()), lengths, "lengths")
    last6 = [r.seconds for r in rg.records if r.run.seed >= 3]
    problems += mismatches(list(re.search(r"the last 6 took (\d+) to (\d+) s", section).groups()),
                           [min(last6), max(last6)], "times")
    flips = [rg.pair(k, "Sign", "DrGRPO")["p_flip"] for k in ("sampled test", "greedy test")]
    problems += mismatches(list(re.search(r"it reads ([\d.]+) for the sampled accuracy .* and ([\d.]+) for\nthe greedy",
                                          section, re.S).groups()), flips, "sign flip")
    assert not problems, "docs/results.md section 2d differs from its data:\n" + "\n".join(problems)


def _select_rows(name: str, all_done: bool = True) -> list[dict[str, str]]:
    """The selection stage's runs (select.csv), in seed order; with ``all_done``, every one finished."""
    with open(RESULTS / name / "select.csv") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["seed"]))
    assert not all_done or all(r["status"] == "done" for r in rows), name
    return rows


def _selection(name: str) -> dict[tuple[str, str], list[float]]:
    """The selection stage's metric per (arm, grid value), in seed order."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in _select_rows(name):
        out.setdefault((r["arm"], r["setting"].split("=")[1]), []).append(float(r["val/reward_mean (last)"]))
    return out


def lr_selection() -> dict[str, list]:
    """Section 8's selection table: per grid value the two selection seeds' validation accuracies and their
    mean, then the chosen rate (as the final runs record it)."""
    sel, d = _selection("real_sign_vs_drgrpo_lr"), data("real_sign_vs_drgrpo_lr")
    out = {}
    for doc, arm in (("Sign", "Sign"), ("Dr. GRPO", "DrGRPO")):
        cells = [v for lr in ("1e-4", "3e-4", "1e-3") for v in (*sel[arm, lr], statistics.mean(sel[arm, lr]))]
        out[doc] = [*cells, d.chosen_lr(arm)]
    return out


def test_the_selection_picked_by_its_registered_rule():
    """Each arm's chosen rate is the grid value with the highest mean selection metric, the first in grid order
    on a tie (the criterion of experiments/real_sign_vs_drgrpo_lr.yaml)."""
    sel, d = _selection("real_sign_vs_drgrpo_lr"), data("real_sign_vs_drgrpo_lr")
    for arm in ("Sign", "DrGRPO"):
        means = {lr: statistics.mean(sel[arm, lr]) for lr in ("1e-4", "3e-4", "1e-3")}
        best = max(means, key=lambda lr: (means[lr], -list(means).index(lr)))
        assert d.chosen_lr(arm) == float(best), (arm, means)


def _same_runs(seeds: range) -> bool:
    """Whether section 8's runs of these seeds record exactly the values of section 2c's runs (the same design
    at the rate both arms chose), every shared metric and arm."""
    a, b = data("real_sign_vs_drgrpo"), data("real_sign_vs_drgrpo_lr")
    shared = [mt.metric.key for mt in a.analysis.metrics if mt.metric.key in {m.metric.key for m in b.analysis.metrics}]
    keyed = {(r.run.arm, r.run.seed): r.values for r in b.records}
    return all(keyed[r.run.arm, r.run.seed][k] == r.values[k] for r in a.records if r.run.seed in seeds for k in shared)


def test_the_learning_rate_section_reads_its_prose_from_the_data():
    d = data("real_sign_vs_drgrpo_lr")
    section = " ".join(DOC[DOC.index("## 8."):DOC.index("## 9.")].replace("−", "-").split())
    assert d.chosen_lr("Sign") == d.chosen_lr("DrGRPO") == 3e-4
    repeated = len(data("real_sign_vs_drgrpo").records)
    assert f"bit for bit the same in all {repeated} of those runs" in section and _same_runs(range(4)), (
        "seeds 0 to 3 repeat section 2c's runs exactly")
    assert d.values("training reward at the first", "Sign") == d.values("training reward at the first", "DrGRPO")

    def says(pattern: str, *values) -> list[str]:
        found = re.search(pattern, section)
        return [f"no {pattern!r}"] if found is None else mismatches(list(found.groups()), list(values), pattern)

    sel = _selection("real_sign_vs_drgrpo_lr")
    mean = {k: statistics.mean(v) for k, v in sel.items()}
    problems = says(r"clear \(([\d.]+) against ([\d.]+) at the next value\)", mean["DrGRPO", "3e-4"], mean["DrGRPO", "1e-3"])
    problems += says(r"([\d.]+) at 3e-4 against ([\d.]+) at 1e-3, each the mean of two runs ([\d.]+) and ([\d.]+) apart",
                     mean["Sign", "3e-4"], mean["Sign", "1e-3"], *[abs(a - b) for a, b in (sel["Sign", "3e-4"], sel["Sign", "1e-3"])])
    problems += says(r"Sign's mean validation accuracy \(([\d.]+), ([\d.]+), ([\d.]+)\) is below Dr. GRPO's at 3e-4 "
                     r"\(([\d.]+)\) and at 1e-3 \(([\d.]+)\)", *[mean["Sign", lr] for lr in ("1e-4", "3e-4", "1e-3")],
                     mean["DrGRPO", "3e-4"], mean["DrGRPO", "1e-3"])
    assert max(mean["Sign", lr] for lr in ("1e-4", "3e-4", "1e-3")) < min(mean["DrGRPO", lr] for lr in ("3e-4", "1e-3"))
    first = {k: d.s(k, "Sign")["mean"] for k in ("training reward at the first", "share of all-wrong groups at the first")}
    problems += says(r"was ([\d.]+) on average over the (\d+) seeds, and (\d+)% of the groups",
                     first["training reward at the first"], d.s("sampled test", "Sign")["n"],
                     Pct(first["share of all-wrong groups at the first"]))
    problems += says(r"(\d+)% of Sign's groups stayed all wrong against (\d+)% of",
                     *[Pct(d.s("share of all-wrong groups over", a)["mean"]) for a in ("Sign", "DrGRPO")])
    ses = [s for c in d.metric("sampled test").cells + d.metric("greedy test").cells for s in c.se]
    problems += says(r"test accuracy is ([\d.]+) to ([\d.]+)", min(ses), max(ses))
    sampled, greedy = d.pair("sampled test", "Sign", "DrGRPO"), d.pair("greedy test", "Sign", "DrGRPO")
    problems += says(r"it reads ([\d.]+) for the sampled accuracy \(Dr. GRPO ahead in all (\d+) seeds\) and ([\d.]+) for "
                     r"the greedy accuracy \(Dr. GRPO ahead in (\d+)\)", sampled["p_flip"], sampled["n"] - sampled["ahead"],
                     greedy["p_flip"], greedy["n"] - greedy["ahead"])
    assert sampled["ahead"] == 0, "the section says Dr. GRPO is ahead in every seed"
    problems += says(r"Sign - Dr. GRPO is ([-\d.]+) \[([-\d.]+), ([-\d.]+)\], Holm-adjusted p ([\d.]+)",
                     sampled["diff"], sampled["lo"], sampled["hi"], sampled["holm"])
    problems += says(r"the same way \(([-\d.]+)\) but is not significant \(Holm ([\d.]+)\)", greedy["diff"], greedy["holm"])
    problems += says(r"answers \(([\d.]+) against ([\d.]+) tokens",
                     *[d.s("mean completion length at the last", a)["mean"] for a in ("Sign", "DrGRPO")])
    _, _, wall = d.runtime()
    select = [float(r["seconds"]) for r in _select_rows("real_sign_vs_drgrpo_lr")]
    problems += says(r"the 12 final runs took ([\d.]+) min wall \((\d+) to (\d+) s a run", wall, min(d.seconds()),
                     max(d.seconds()))
    problems += says(r"the 12 selection runs took (\d+) run-minutes \((\d+) to (\d+) s a run", sum(select) / 60,
                     min(select), max(select))
    problems += says(r"Together (\d+) run-minutes against the 540 estimated: the final runs took (\d+) to (\d+) minutes",
                     (sum(select) + sum(d.seconds())) / 60, min(d.seconds()) / 60, max(d.seconds()) / 60)
    assert not problems, "docs/results.md section 8 differs from its data:\n" + "\n".join(problems)


def degeneracy() -> dict[str, list]:
    """Section 1: mean, sd, 95% t interval and n per metric; two metrics to a row print mean / mean, sd / sd."""
    deg = data("degeneracy")

    def row(*keys: str, ci: tuple[str, ...] | None = None) -> list:
        s = [deg.s(k, "GRPO") for k in keys]
        ci = keys if ci is None else ci
        return [*[x["mean"] for x in s], *[x["sd"] for x in s],
                *[v for k in ci for v in (deg.s(k, "GRPO")["ci_low"], deg.s(k, "GRPO")["ci_high"])], s[0]["n"]]

    return {
        "observed degenerate share D": row("rollout/degenerate_frac"),
        "pooled i.i.d. prediction": [None, *row("rollout/degenerate_iid_pred")],  # the label's "(1 − p̄)"
        "**excess D − pooled prediction**": row("rollout/degenerate_excess (mean)"),
        "excess at the first step": [None, *row("rollout/degenerate_excess (first)", "rollout/degenerate_excess (tail)")],
        "unbiased per-prompt prediction": [None, *row("rollout/degenerate_resample_pred")],  # "16 fresh samples"
        "**D − unbiased per-prompt prediction**": row("observed D minus the unbiased"),
        "p̄ of the fresh samples": row("p-bar of the resampled", "rollout/degenerate_resample_pooled_pred", ci=()),
        "per-prompt moving-average": row("rollout/degenerate_ema_pred", "rollout/degenerate_ema_excess",
                                         ci=("rollout/degenerate_ema_excess",)),
        "all-correct share": row("rollout/all_correct_frac", "rollout/all_wrong_frac", ci=()),
        "sampled held-out accuracy before": [None, *row("heldout/reward_mean_before", "heldout/reward_mean_after", ci=())],
    }


def sign_vs_drgrpo() -> dict[str, list]:
    """Section 2, keyed by "lr | policy"."""
    svd, acc4 = data("sign_vs_drgrpo"), "sampled test accuracy after training (4 samples"
    out = {}
    for lr in ("5e-5", "1e-4", "3e-4"):
        for p in ("weak", "strong"):
            s = f"lr={lr},policy={p}"
            pair = svd.pair(acc4, "Sign", "NormDrGRPO", s)
            out[f"{lr} | {p}"] = [float(lr), *svd.mci(acc4, "Sign", s), *svd.mci(acc4, "NormDrGRPO", s), pair["diff"],
                                  pair["p_t"], pair["holm"], pair["ahead"], pair["n"]]
    return out


ARMS_2B = {"Sign": "Sign", "Dr. GRPO": "DrGRPO", "normalised Dr. GRPO": "NormDrGRPO",
           "GRPO + filter_degenerate": "GRPO-filter", "Sign, all-wrong groups at 0": "Sign-zero-all-wrong"}  # fmt: skip


def sign_starvation_arms() -> dict[str, list]:
    st, acc4 = data("sign_starvation"), "sampled test accuracy after training (4 samples"
    return {doc: [st.chosen_lr(arm), *st.mci(acc4, arm), *st.mci("greedy test", arm)]
            for doc, arm in ARMS_2B.items()}  # fmt: skip


def sign_starvation_pairs() -> dict[str, list]:
    st, acc4 = data("sign_starvation"), "sampled test accuracy after training (4 samples"
    out = {}
    for doc, arm in list(ARMS_2B.items())[1:]:
        p = st.pair(acc4, "Sign", arm)
        out[doc.replace(" groups", "")] = [p["diff"], p["lo"], p["hi"], p["ahead"], p["n"], p["p_t"], p["p_flip"], p["holm"], p["bh"]]
    return out


def _sign_drgrpo_row(name: str, key: str, family: bool) -> list:
    """A per-seed row of sections 2c and 2d: Sign's values, Dr. GRPO's, the paired difference with its interval and
    p, and the Holm p for the primary metrics."""
    d = data(name)
    p = d.pair(key, "Sign", "DrGRPO")
    return [*d.values(key, "Sign"), *d.values(key, "DrGRPO"), p["diff"], p["lo"], p["hi"], p["p_t"],
            *([p["holm"]] if family else [])]


def sign_against_drgrpo(name: str) -> dict[str, list]:
    return {
        "sampled test accuracy": [None, None, *_sign_drgrpo_row(name, "sampled test", True)],  # "(1 × 1000)"
        "greedy test accuracy": [None, *_sign_drgrpo_row(name, "greedy test", True)],
        "training reward over the 12 steps": [None, *_sign_drgrpo_row(name, "training reward over", False)],
        "completion length at the last step": _sign_drgrpo_row(name, "mean completion length at the last", False),
    }


def softmax_budget() -> dict[str, list]:
    sm, acc4 = data("softmax_budget"), "sampled test accuracy after training (4 samples"
    arms = ("GRPO", "SoftmaxGRPO-tau0.1", "SoftmaxGRPO-tau0.3")

    def row(key: str, holm: bool = False, ci: bool = False) -> list:
        p = sm.pair(key, "SoftmaxGRPO-tau0.1", "GRPO")
        return [*[sm.s(key, a)["mean"] for a in arms], p["diff"], *([p["lo"], p["hi"]] if ci else []), p["p_t"],
                *([p["holm"]] if holm else [])]

    proxy = [f"budget/share_{b} " for b in ("0.0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0")]
    return {
        "**exact budget share, pass rate < 0.2**": [None, *row("budget/exact_share_0.0-0.2", True, True)],
        "exact budget share, pass rate ≥ 0.9": [None, *row("budget/exact_share_0.9-1.0")],
        "proxy share": [None, None, None, None, None, None, None, None,  # the bins' edges in the label
                        *[sm.s(k, a)["mean"] for a in arms for k in proxy],
                        sm.pair(proxy[0], "SoftmaxGRPO-tau0.1", "GRPO")["diff"], None],
        "share of prompts with pass rate < 0.2": [None, *row("budget/prompt_share_0.0-0.2")],
        "**sampled test accuracy**": [None, None, *row(acc4, True, True)],  # "(4 × 1000, primary)"
        "greedy test accuracy": [None, *row("greedy test", False)],
    }


def gradient_rank() -> dict[str, list]:
    gr = data("gradient_rank")
    out = {}
    for g in (2, 4, 8):
        for p in (1, 16):
            s = f"G={g},P={p}"
            tost = [gr.tost("grad/erank", "GRPO", s)["p"], gr.tost("grad/erank", "GRPO", s)["holm"]] if p == 1 else []
            dedup_tost = [gr.tost("grad/dedup_erank", "GRPO", s)["p"]] if p == 1 else []
            out[f"G={g}, P={p}"] = [
                g, p, *gr.mci("grad/erank", "GRPO", s), *tost, gr.s("grad/dedup_erank", "GRPO", s)["mean"], *dedup_tost,
                *[gr.s(k, "GRPO", s)["mean"] for k in ("distinct completions", "rows (completions", "rows after de-dup",
                                                          "grad/stable_rank", "sampled held-out accuracy after")]]  # fmt: skip
    return out


def passk_crossing() -> dict[str, list]:
    pk = data("passk_crossing")
    out = {}
    for doc, arm in {"Sign": "Sign", "GRPO": "GRPO", "Dr. GRPO": "DrGRPO"}.items():
        crossed, ks = _crossing(arm)
        gains = [v for k in ("gain in pass@1 ", "gain in pass@256") for v in
                 (*pk.mci(k, arm), pk.one_sample(k, arm)["holm"])]  # fmt: skip
        out[doc] = [*gains, crossed, len(pk.values("gain in pass@1 ", arm)), *ks]
    return out


def sign_balance_skill() -> dict[str, list]:
    sb, arms = data("sign_balance_skill"), ("GRPO", "SignBalance")
    skill, ent = sb.pair("test skill after", "SignBalance", "GRPO"), sb.pair("entropy of the sampled test answers after", "SignBalance", "GRPO")

    def plain(key: str) -> list:
        p = sb.pair(key, "SignBalance", "GRPO")
        return [*[sb.s(key, a)["mean"] for a in arms], p["diff"], p["p_t"]]

    ratios = {a: _entropy_ratios(a) for a in arms}
    return {
        "**test skill**": [sb.s("test skill of the starting", "GRPO")["mean"], *sb.mci("test skill after", "GRPO"),
                           *sb.mci("test skill after", "SignBalance"), skill["diff"], skill["lo"], skill["hi"],
                           skill["ahead"], skill["n"], skill["holm"]],
        "**entropy of the sampled answers, nats**": [
            sb.s("entropy of the sampled test answers of the starting", "GRPO")["mean"],
            *sb.mci("entropy of the sampled test answers after", "GRPO"),
            *sb.mci("entropy of the sampled test answers after", "SignBalance"), ent["diff"], ent["holm"]],
        "its ratio to the start's, per seed": [min(ratios["GRPO"]), max(ratios["GRPO"]), min(ratios["SignBalance"]),
                                               max(ratios["SignBalance"]), sum(r >= 0.9 for r in ratios["SignBalance"]),
                                               len(ratios["SignBalance"]), None],  # the criterion's 0.90
        "share of the most common sampled answer": plain("share of the most common"),
        "sampled test accuracy": [sb.s("sampled test accuracy of the starting", "GRPO")["mean"],
                                  *plain("sampled test accuracy after")],
        "greedy test accuracy": plain("greedy test accuracy after"),
        "advantage of a lone correct completion": [sb.s("advantage of a lone", a)["mean"] for a in arms],
    }


#: the estimators of section 7 and the objective each targets (its norm ratio is to that objective's gradient)
TARGETS = {"GRPO": "reward", "DrGRPO": "reward", "RLOO": "reward", "Sign": "reward", "MaxRL": "maxrl",
           "SoftmaxGRPO (tau 0.1)": "maxrl", "PassAtK (k 4)": "pass@k"}  # fmt: skip


def fidelity(name: str, snr_bins: tuple[str, ...]) -> dict[str, list]:
    bins = _fidelity(name)[0]
    out = {}
    for doc, target in TARGETS.items():
        est = doc.split(" (")[0]
        cos = [bins[est, obj, "all"]["cos"] for obj in ("reward", "maxrl", "pass@k")]
        ratio = [bins[est, target, "all"]["norm_ratio"], *([None, None] if est == "DrGRPO" else [])]  # (G − 1)/G = 0.875
        out[doc] = [*([None] if "(" in doc else []), *cos, *ratio,
                    *[bins[est, "reward", b]["snr"] for b in snr_bins]]  # None: the label's tau or k
    return out


TABLES = {  # header start -> (label columns, the mapping)
    "claim (section)": (2, claims),  # the claim and the paper's numbers are not ours
    "experiment | claim": (2, status),
    "per run: mean over the 300 steps": (0, degeneracy),
    "lr | policy": (0, sign_vs_drgrpo),
    "arm | chosen lr": (1, sign_starvation_arms),
    "Sign − | mean difference": (1, sign_starvation_pairs),
    "per seed (0, 1, 2, 3)": (0, lambda: sign_against_drgrpo("real_sign_vs_drgrpo")),
    "per seed (0 to 5)": (0, lambda: sign_against_drgrpo_six("rg_sign_vs_drgrpo")),
    "per seed, each arm at its chosen rate (0 to 5)": (0, lambda: sign_against_drgrpo_six("real_sign_vs_drgrpo_lr")),
    "selection seeds 100, 101 (mean)": (1, lr_selection),
    "selection seed 100": (1, agent_selection),
    "greedy test accuracy, seeds 0 to 4": (1, agent_final),
    "SignBalance − (greedy test accuracy)": (1, agent_pairs),
    "training episodes (secondary)": (1, agent_secondary),
    "mean over steps, then seeds (n = 5)": (0, softmax_budget),
    "setting | erank": (0, gradient_rank),
    "n = 5 | gain in pass@1": (1, passk_crossing),
    "after training (mean [95% t], n = 10": (0, sign_balance_skill),
    "estimator | cos to grad p (all 32)": (0, lambda: fidelity("fidelity", ("0.0-0.2", "0.2-0.5", "0.5-0.7", "all"))),
    "estimator | cos to grad p (all 8)": (0, lambda: fidelity("fidelity_real", ("all",))),
}


def _check(header: str) -> list[str]:
    label_columns, mapping = TABLES[header]
    expected = mapping()
    _, rows = table(DOC, header)
    problems = []
    for row in rows:
        key = " | ".join(row)
        found = [k for k in expected if row[0] == k or " | ".join(row[:2]) == k]  # an exact label first
        found = found or [k for k in expected if key.startswith(k)]
        if len(found) != 1:
            problems.append(f"row {row[0]!r}: {len(found)} mappings (add it to {mapping.__name__})")
            continue
        values = expected[found[0]]
        if label_columns == 2 and mapping is claims:  # the ours, statistics and verdict columns
            cells = row[2:5]
        else:
            cells = row[label_columns:]
        problems += mismatches([n for c in cells for n in numbers(c)], values, f"{header!r} row {row[0][:40]!r}")
    unmatched = [k for k in expected if not any(" | ".join(r).startswith(k) for r in rows)]
    return problems + [f"mapped row {k!r} is not in the doc" for k in unmatched]


@pytest.mark.parametrize("header", list(TABLES))
def test_each_table_of_the_results_doc_prints_its_data(header):
    problems = _check(header)
    assert not problems, "docs/results.md differs from its data:\n" + "\n".join(problems)


def test_the_tables_headers_print_their_data():
    gr = data("gradient_rank")
    before = [v for s in ("G=2,P=1", "G=4,P=1", "G=8,P=1", "G=2,P=16", "G=4,P=16", "G=8,P=16")
              for v in gr.values("sampled held-out accuracy before", "GRPO", s)]  # fmt: skip
    assert f"(before {statistics.mean(before):.3f})" in table(DOC, "setting | erank")[0][-1]
    counts = {b: int(_fidelity("fidelity")[0]["GRPO", "reward", b]["prompts"]) for b in ("0.0-0.2", "0.2-0.5", "0.5-0.7", "all")}
    head = " | ".join(table(DOC, "estimator | cos to grad p (all 32)")[0])
    assert f"(all {counts['all']})" in head and f"p < 0.2 ({counts['0.0-0.2']})" in head
    assert f"0.2-0.5 ({counts['0.2-0.5']})" in head and f"0.5-0.7 ({counts['0.5-0.7']})" in head


def _rebuilt(exp, records, analysis) -> list[str]:
    """The report's test sections, as the compare tool writes them."""
    lines = [*family_section(exp, analysis)]
    for mt in analysis.metrics:
        lines += metric_section(exp, mt)
    for profile in exp.profiles:
        if profile.baseline:
            lines += crossing_section(exp, profile, records)
    return lines


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_each_published_report_is_its_runs_csv_rebuilt(name):
    """The tables of docs/results/<name>/report.md are what the compare tool computes from runs.csv today (the
    doc's sections point readers to those reports for every table)."""
    d = data(name)
    report = (RESULTS / name / "report.md").read_text()
    missing = [line for line in _rebuilt(d.exp, d.records, d.analysis) if line.strip() and line not in report]
    assert not missing, f"docs/results/{name}/report.md is not its runs.csv rebuilt: {missing[:3]}"


@pytest.mark.parametrize("move", ["up", "down", "either way"])
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_a_report_rebuilt_from_values_one_ulp_away_is_the_same(name, move):
    """Another CPU, thread count or summation order leaves values a unit in the last place (ULP) away: every
    value of runs.csv moved one ULP (all up, all down, or each its own way) rebuilds the published report."""
    d = data(name)
    rng = random.Random(0)
    records = copy.deepcopy(d.records)
    for r in records:
        for key, v in r.values.items():
            way = {"up": 1, "down": -1}.get(move) or rng.choice([-1, 1])
            r.values[key] = float(numpy.nextafter(v, math.copysign(math.inf, way)))
    report = (RESULTS / name / "report.md").read_text()
    lines = _rebuilt(d.exp, records, analyse(d.exp, records))
    missing = [line for line in lines if line.strip() and line not in report]
    assert not missing, f"{name}, every value one ULP {move}: rows not in its report: {missing[:3]}"
