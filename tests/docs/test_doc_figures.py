"""More of docs/*.md's measurements against their committed data (docs/results/) or against the library that
computes them, at the digits printed: the bootstrap coverage in methods.md, the weight table in diagnostics.md,
the sampler agreement in pairing.md, the reward throughput in data.md, the memory table in scale.md and the prose
of agents.md."""

from __future__ import annotations

import re
import statistics
import sys

import torch

from lit_grpo.commands.curves import omega
from lit_grpo.diagnostics.weight_curve import TABLE_PS, format_table
from tests.docs.doc_tables import Pct, mismatches, numbers, table
from tests.docs.test_doc_numbers import ROOT, _doc, _json, _says, _table_problems

sys.path.insert(0, str(ROOT / "bench"))

from sampler_agreement import agreement  # noqa: E402


def _problems(name: str, problems: list[str]) -> str:
    return f"{name} differs from its data:\n" + "\n".join(problems)


# ---- docs/methods.md: coverage of the bootstrap interval, docs/results/bootstrap_coverage.json -----------------


def test_the_methods_doc_prints_the_bootstrap_coverage_run():
    doc = _doc("docs/methods.md")
    data = _json("bootstrap_coverage.json")
    at = {row["n"]: row["coverage"] for row in data["coverage"]}
    problems = _says(doc, r"normal data, (\d+) samples of each size: ([\d.]+) at n = (\d+), ([\d.]+) at (\d+),\n"
                     r"([\d.]+) at (\d+)\)", data["settings"]["reps"], at[5], 5, at[7], 7, at[10], 10)  # fmt: skip
    # "below that ... covers about 0.91": every measured n from 5 up to the threshold
    below = [c for n, c in at.items() if 5 <= n < 10]
    problems += [f"about {x} is not every n in 5..9: {below}" for x in re.findall(r"covers about ([\d.]+)", doc)
                 if not all(mismatches([x], [c], "") == [] for c in below)]  # fmt: skip
    assert not problems, _problems("docs/methods.md", problems)


# ---- docs/diagnostics.md: the weight table is what `lit-grpo curves` prints --------------------------------------


def test_the_diagnostics_doc_prints_what_lit_grpo_curves_prints():
    doc = _doc("docs/diagnostics.md")
    command = re.search(r"```\nlit-grpo curves --estimators (.*?) --group-size (\d+)", doc, re.S)
    specs, group = command.group(1).replace("\\\n", " ").split(), int(command.group(2))
    printed = re.search(r"It prints\n\n```\n(.*?)\n```", doc, re.S).group(1)
    assert printed == format_table(omega(specs, group, torch.tensor(TABLE_PS)), TABLE_PS)


# ---- docs/pairing.md: the sampler's agreement, docs/results/sampler_agreement.json --------------------------------


def test_the_pairing_doc_prints_the_sampler_agreement():
    doc, data = " ".join(_doc("docs/pairing.md").split()), _json("sampler_agreement.json")
    s = data["settings"]
    problems = _says(doc, r"with the same seed, (\d+)% of ([\d,]+) draws from slightly perturbed distributions pick the "
                     r"same token, (\d+)% with another seed; `bench/sampler_agreement.py`: (\d+) tokens, logits perturbed "
                     r"by noise of standard deviation ([\d.]+)", Pct(data["same_seed"]), None, Pct(data["other_seed"]),
                     s["vocab"], s["noise"])  # fmt: skip
    draws = re.search(r"([\d,]+) draws from slightly", doc)
    if draws is None or int(draws.group(1).replace(",", "")) != s["draws"]:
        problems.append(f"the draws are not {s['draws']}")
    # the committed shares are the script's (loosely: another CPU's kernels may differ in a draw or two)
    again = agreement(s["vocab"], s["noise"], s["draws"], s["seed"], s["data_seed"])
    assert all(abs(again[k] - data[k]) < 0.01 for k in ("same_seed", "other_seed"))
    assert not problems, _problems("docs/pairing.md", problems)


# ---- docs/data.md: reward scoring throughput, docs/results/reward_throughput.json ---------------------------------


def test_the_data_doc_prints_the_reward_throughput_run():
    doc = re.sub(r"(\d),(\d{3})\b", r"\1\2", _doc("docs/data.md"))  # 841,341 items/s read as one number
    data = _json("reward_throughput.json")
    rates = {r["reward"]: r["items_per_s"] for r in data["rewards"]}
    start = {r["reward"]: float(re.search(r"pool start ([\d.]+) s", r["note"]).group(1))
             for r in data["rewards"] if "pool" in r["note"]}  # fmt: skip
    in_process = rates["MathVerify, in process"]
    problems = _table_problems(doc, "reward (512 items per call)", {
        "ExactMatch, in process": [rates["ExactMatch, in process"]],
        "TextSimilarity, in process": [rates["TextSimilarity, in process"]],
        "MathVerify, in process": [in_process, 1000 / in_process],
        "MathVerify, pool of 1": [rates["MathVerify, pool of 1"], start["MathVerify, pool of 1"]],
        "MathVerify, pool of 2": [rates["MathVerify, pool of 2"], start["MathVerify, pool of 2"]],
    })  # fmt: skip
    steps = {r["reward"]: r for r in data["quickstart"]}
    problems += _table_problems(doc, "reward | scoring s/step", {
        k: [r["score_s"], r["step_s"], Pct(r["score_s"] / r["step_s"])] for k, r in steps.items()})  # fmt: skip
    m = data["machine"]
    problems += _says(doc, r"load average ([\d.]+) at the start and\n([\d.]+) at the end", m["load_1min_before"],
                      m["load_1min_after"])  # fmt: skip
    problems += _says(doc, r"it adds one\nstart-up of about (\d+) s", start["MathVerify, pool of 1"])
    problems += _says(doc, r"at about (\d+) ms per realistic item, a GSM8K step of (\d+) × (\d+)\ncompletions spends "
                      r"about ([\d.]+) s scoring", 1000 / in_process, None, None, 32 * 8 / in_process)  # fmt: skip
    if min(rates["MathVerify, pool of 1"], rates["MathVerify, pool of 2"]) < in_process:
        problems.append("the pool was slower per item than scoring in process, as the doc says it was not")
    assert not problems, _problems("docs/data.md", problems)


# ---- docs/scale.md: what the GPU checks assert is what tests/gpu/ asserts ------------------------------------------


def test_the_scale_doc_states_the_bounds_tests_gpu_asserts():
    _, rows = table(_doc("docs/scale.md"), "check | asserted")
    code = (ROOT / "tests" / "gpu" / "test_gpu.py").read_text()
    asserted = {
        "HF engine": r'logp_diff_mean"\]\) < ([\d.e-]+)',
        "`precision: bf16-mixed`": r"cos > ([\d.]+)\n\n\ndef test_bf16_weights",
        "`model.dtype: bfloat16`": r"cos > ([\d.]+)\n\n\ndef test_fsdp1",
        "FSDP2": r"def test_fsdp2.*?worst < ([\d.e-]+)",
        "`FSDPStrategy` (FSDP1": r"def test_fsdp1.*?worst < ([\d.e-]+)",
    }
    problems = []
    for start, pattern in asserted.items():
        row = next(r for r in rows if r[0].startswith(start))
        bound = re.search(pattern, code, re.S).group(1)
        if numbers(row[1]) != [bound]:
            problems.append(f"{start}: the doc says {row[1]!r}, tests/gpu asserts {bound}")
    assert not problems, "docs/scale.md differs from tests/gpu/test_gpu.py:\n" + "\n".join(problems)


# ---- docs/agents.md: the prose under the rendered table, docs/results/agents/ -------------------------------------


def test_the_agents_doc_prose_reads_its_data():
    doc = " ".join(_doc("docs/agents.md").split())
    calc = {
        n: _json(f"agents/calculator/{n}.json")
        for n in ("no_tool", "base_tool", "sft_start", "after_rl", "curve")
    }
    srch = {
        n: _json(f"agents/search_agent/{n}.json")
        for n in ("no_tool", "base_tool", "sft_start", "after_rl", "curve")
    }
    acc = "sampled_accuracy"
    calls = calc["curve"]["per_step"]["env/tool_calls_mean"]
    reward = srch["curve"]["per_step"]["rollout/reward_mean"]
    problems = _says(doc, r"offered \(no call in (\d+) episodes\) and multiplies two-digit numbers in its head at ([\d.]+) "
                     r"either way", calc["base_tool"]["prompts"], calc["no_tool"][acc])  # fmt: skip
    problems += _says(doc, r"in its head at ([\d.]+) either way", calc["base_tool"][acc])
    assert calc["base_tool"]["episodes"]["with_call"] == 0
    problems += _says(
        doc,
        r"The supervised start calls the tool in (\d+)% of its episodes",
        Pct(calc["sft_start"]["episodes"]["with_call"]),
    )
    problems += _says(doc, r"copies its result, ([\d.]+) on held-out prompts", calc["after_rl"][acc])
    problems += _says(doc, r"overshoot to ([\d.]+) \(repeated calls\) at the (\d+)th of (\d+) steps", max(calls),
                      calls.index(max(calls)) + 1, len(calls))  # fmt: skip
    problems += _says(
        doc, r"facts \((\d+) of (\d+) either way", srch["no_tool"][acc], srch["no_tool"]["prompts"]
    )
    assert srch["base_tool"][acc] == 0 and srch["base_tool"]["episodes"]["with_call"] == 0
    problems += _says(doc, r"calls `search` in (\d+)% of its episodes and answers ([\d.]+); after (\d+) GRPO steps "
                      r"\((\d+) minutes\) it calls it in (\d+)% and answers ([\d.]+)",
                      Pct(srch["sft_start"]["episodes"]["with_call"]), srch["sft_start"][acc], srch["curve"]["steps"],
                      srch["curve"]["summary"]["training_min"], Pct(srch["after_rl"]["episodes"]["with_call"]),
                      srch["after_rl"][acc])  # fmt: skip
    problems += _says(doc, r"the (\d+) tool errors in (\d+) episodes", srch["after_rl"]["episodes"]["tool_errors"],
                      srch["after_rl"]["prompts"])  # fmt: skip
    problems += _says(doc, r"training reward \(([\d.]+) to ([\d.]+) over the first and last five steps\)",
                      statistics.mean(reward[:5]), statistics.mean(reward[-5:]))  # fmt: skip
    problems += _says(doc, r"gains \(\+([\d.]+) and \+([\d.]+) points after ([\d.]+) and ([\d.]+) minutes of training",
                      100 * (calc["after_rl"][acc] - calc["sft_start"][acc]),
                      100 * (srch["after_rl"][acc] - srch["sft_start"][acc]), calc["curve"]["summary"]["training_min"],
                      srch["curve"]["summary"]["training_min"])  # fmt: skip
    problems += _says(doc, r"the first validation whose sampled accuracy reached ([\d.]+)", _sft_threshold())
    assert "+15 points" not in doc, "docs/agents.md quotes a +15-point target that no committed file records"
    assert not problems, _problems("docs/agents.md", problems)


def _sft_threshold() -> float:
    """The search agent's supervised start: the EarlyStopping threshold of its config."""
    import yaml

    config = yaml.safe_load((ROOT / "configs" / "real" / "search_agent_sft.yaml").read_text())
    stop = next(c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("EarlyStopping"))
    return stop["init_args"]["stopping_threshold"]
