"""The counting and reporting of the GRPO step benchmark (``python -m bench.grpo_step``): useful against
executed work, paired estimates, and the tables of docs/performance.md recomputed from the committed run
data."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.grpo_step import run, workloads  # noqa: E402
from bench.grpo_step.common import PHASES, causal_context, group_counts  # noqa: E402
from bench.grpo_step.report import (  # noqa: E402
    flop_rates,
    forward_flops,
    forward_parts,
    paired_ratio,
    render,
    render_realistic,
    roofline,
    training_flops,
    useful_flops,
)

# one layer, H = 4, two query heads and one key-value head of dim 2, F = 8, V = 10: per token through the
# block 2 x (q 4x4 + k 2x4 + v 2x4 + o 4x4 + gate, up, down 3 x 4x8) = 2 x 144 FLOPs; LM head 2 x 40 a
# completion token; attention 4 x L x (heads x head dim) = 16 a key attended
TINY = {"hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "intermediate_size": 8, "vocab_size": 10}


def test_useful_work_is_the_rows_of_groups_whose_rewards_differ_with_their_prompt_once():
    # three groups of 2: mixed, all 0, mixed with an unscorable (NaN) row that still differs from nothing
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, float("nan")]
    prompt_lens = [5, 5, 7, 7, 3, 3]
    completion_lens = [2, 4, 6, 8, 1, 9]
    counts = group_counts(rewards, prompt_lens, completion_lens, group=2)
    assert counts["groups"] == 3 and counts["mixed_groups"] == 1  # NaN aside, the last group is all 1.0
    assert counts["useful_rows"] == 2 and counts["useful_prompt_tokens"] == 5 and counts["useful_tokens"] == 6
    # a trainer that trains every row with its prompt
    assert counts["trained_rows"] == 6 and counts["trained_prompt_tokens"] == 30 and counts["trained_tokens"] == 30


def test_executed_work_counts_the_trained_rows_and_each_prompt_once_when_shared():
    rewards = [1.0, 0.0, 0.0, 0.0]
    trained = [True, True, False, False]
    counts = group_counts(rewards, [5, 5, 7, 7], [2, 4, 6, 8], group=2, trained_rows=trained, prompt_once=True)
    assert counts["trained_rows"] == 2 and counts["trained_prompt_tokens"] == 5 and counts["trained_tokens"] == 6
    assert {k: counts[f"useful_{k}"] for k in ("rows", "prompt_tokens", "tokens")} == {
        k: counts[f"trained_{k}"] for k in ("rows", "prompt_tokens", "tokens")}
    separate = group_counts(rewards, [5, 5, 7, 7], [2, 4, 6, 8], group=2, trained_rows=trained)
    assert separate["trained_prompt_tokens"] == 10


def test_the_docs_tables_are_the_committed_run_rendered():
    doc = (ROOT / "docs" / "performance.md").read_text()
    # each realistic block and its data:
    # grpo_step.py:realistic[:NAMES] <- docs/results/grpo_step_realistic[-NAMES].json
    names = re.findall(r"<!-- grpo_step\.py:realistic(:[\w+]+)?:begin -->", doc)
    assert "" in names, "docs/performance.md lost its realistic block (<!-- grpo_step.py:realistic:begin -->)"
    for name in names:
        data = ROOT / "docs" / "results" / f"grpo_step_realistic{name.replace(':', '-')}.json"
        if not data.exists():
            pytest.fail(f"{data.relative_to(ROOT)} is missing: the grpo_step.py:realistic{name} tables have "
                        "no data")
        marker = f"<!-- grpo_step.py:realistic{name}"
        begin, end = f"{marker}:begin -->\n", f"{marker}:end -->"
        block = doc[doc.index(begin) + len(begin) : doc.index(end)]
        report = json.loads(data.read_text())
        assert report["meta"].get("block", "grpo_step.py:realistic") == f"grpo_step.py:realistic{name}"
        assert block == render_realistic(report), (
            f"docs/performance.md differs from its data: python -m bench.grpo_step --render "
            f"{data.relative_to(ROOT)} --write docs/performance.md")


def test_the_main_block_is_the_committed_run_rendered():
    doc = (ROOT / "docs" / "performance.md").read_text()
    data = ROOT / "docs" / "results" / "grpo_step.json"
    begin, end = "<!-- grpo_step.py:begin -->\n", "<!-- grpo_step.py:end -->"
    block = doc[doc.index(begin) + len(begin) : doc.index(end)]
    report = json.loads(data.read_text())
    assert {"peak", "compare", "memory", "scaling"} <= set(report), "the main block's run lacks a part"
    assert block == render(report), (
        "docs/performance.md differs from its data: python -m bench.grpo_step --render "
        "docs/results/grpo_step.json "
        "--write docs/performance.md")


def test_causal_context_counts_the_keys_each_token_attends():
    # prompt of 3 (1 + 2 + 3 keys), completion of 2 after it (4 + 5 keys)
    assert causal_context(3, 2) == 15 and causal_context(3, 2, prompt=False) == 9 and causal_context(0, 3) == 6


def test_forward_flops_by_hand_on_a_one_layer_model():
    # one sequence, 3 prompt + 2 completion tokens: 2 x 144 x 5 + 2 x 40 x 2 + 16 x 15
    assert forward_flops(TINY, 3, 2, 1, context=15) == 1440 + 160 + 240
    assert forward_flops(TINY, 3, 2, 1) == 1440 + 160 + 16 * 5 * 6 / 2  # the mean-length estimate: 5 x (5+1)/2


def test_training_flops_by_hand_with_and_without_adapters():
    # one sequence, 3 prompt + 2 completion tokens, 15 keys attended: weights 1440, head 160, attention 240
    assert training_flops(TINY, 3, 2, 1, context=15) == 3 * (1440 + 160 + 240)
    lora = {"r": 1, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    # adapters: 2 x r x (in + out) a token: (4+4) + (4+2) + (4+2) + (4+4) + (4+8) + (4+8) + (8+4) = 64,
    # x 2 x 5 tokens
    assert forward_parts(TINY, 3, 2, 1, context=15, lora=lora)["adapters"] == 640
    assert forward_parts(TINY, 3, 2, 1, context=15, lora={"r": 2, "target_modules": ["q_proj"]})["adapters"] == 160
    # frozen weights and head: forward + the activations' gradients; attention and adapters: 3 forwards
    assert training_flops(TINY, 3, 2, 1, context=15, lora=lora) == 2 * (1440 + 160) + 3 * (240 + 640)


def test_useful_flops_of_generation_and_training_by_hand():
    # group 1: prompt 3, completions 2 and 1, rewards differ; group 2: prompt 2, completions 1 and 1, equal
    counts = group_counts([1.0, 0.0, 0.0, 0.0], [3, 3, 2, 2], [2, 1, 1, 1], group=2)
    assert counts["sampled_prompt_tokens"] == 5 and counts["sampled_tokens"] == 5
    assert counts["sampled_context"] == (6 + 9 + 4) + (3 + 3 + 3)  # each prompt once, every completion
    assert counts["useful_context"] == 6 + 9 + 4
    assert counts["trained_context"] == 2 * 6 + 9 + 4 + 2 * 3 + 3 + 3  # every row with its own prompt
    gflop = useful_flops(TINY, counts, steps=1)
    # generation: 2 x 144 x (5 + 5) + 2 x 40 x 5 + 16 x 28;
    # training: 3 x (2 x 144 x (3 + 3) + 2 x 40 x 3 + 16 x 19)
    assert gflop["generation"] * 1e9 == pytest.approx(2880 + 400 + 448)
    assert gflop["training"] * 1e9 == pytest.approx(3 * (1728 + 240 + 304))
    assert gflop["step"] == pytest.approx(gflop["generation"] + gflop["training"])
    assert useful_flops(TINY, {k: 2 * v for k, v in counts.items()}, steps=2) == pytest.approx(gflop)  # per step
    assert useful_flops(TINY, {"useful_tokens": 1.0}, steps=1) is None  # a run from before the context counts


def test_the_compare_rates_count_what_each_trainer_ran_and_generation_once():
    # the same two groups: lit-grpo encodes each prompt once a group, TRL once a row (its attention context
    # too)
    counts = group_counts([1.0, 0.0, 0.0, 0.0], [3, 3, 2, 2], [2, 1, 1, 1], group=2)
    times = {"forward_s": 1.0, "backward_s": 2.0, "step_s": 4.0}
    lit = {**counts, **times, "trained_prompt_tokens": 5, "trained_context": counts["sampled_context"]}
    trl = {**counts, **times, "trained_prompt_tokens": 10}
    generation = forward_flops(TINY, 5, 5, 0, counts["sampled_context"])  # 2880 + 400 + 448, as above
    for row, prompts, context in ((lit, 5, 28), (trl, 10, 37)):
        rates = flop_rates(TINY, row, sequences=4)
        train = training_flops(TINY, prompts, 5, 4, context)
        assert rates["flop_count"] == "executed"
        assert rates["train_gflop"] * 1e9 == pytest.approx(train)
        assert rates["train_gflops"] * 1e9 == pytest.approx(train / 3)
        assert rates["step_gflops"] * 1e9 == pytest.approx((train + generation) / 4)
    assert flop_rates(TINY, lit, 4)["train_gflop"] < flop_rates(TINY, trl, 4)["train_gflop"]
    old = {"prompt_tokens": 10, "tokens": 5, **times}  # a run before the counts: every row, generation once more
    assert flop_rates(TINY, old, 4)["step_gflops"] * 1e9 == pytest.approx(4 * forward_flops(TINY, 10, 5, 4) / 4)
    assert flop_rates(TINY, old, 4)["flop_count"] == "every row"


def test_roofline_divides_each_phase_by_its_time_and_the_peak():
    seconds = {"generate_s": 1.0, "score_s": 9.0, "forward_s": 1.0, "backward_s": 2.0, "optimizer_s": 9.0,
               "step_s": 4.0}
    out = roofline({"generation": 2.0, "training": 6.0, "step": 8.0}, seconds, peak_gflops=10.0)
    assert {k: (v["gflops"], v["peak_frac"]) for k, v in out.items()} == {
        "generation": (2.0, 0.2), "training": (2.0, 0.2), "step": (2.0, 0.2)}
    assert roofline({"step": 8.0}, seconds, None)["step"]["peak_frac"] is None


def test_reports_without_the_new_fields_render_them_as_not_recorded():
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    report.pop("realistic_peak")  # as a report written before the machine state and the roofline were recorded
    for key in ("machine_start", "machine_end", "busy"):
        report["meta"].pop(key)
    for r in report["realistic"]:
        r.pop("same_prompts")
        for side in ("lit", "trl"):
            r[side].pop("roofline")
    text = render_realistic(report)
    assert "Machine at the start: not recorded" in text and "workload | trainer | generation GFLOP" in text
    assert "| real | TRL | " + " | ".join(["not recorded"] * 9) + " |" in text
    assert "quickstart not recorded, real not recorded" in text
    assert "share of the matmul peak" not in text  # no roofline, no target on it
    ratios = report["realistic"][0]["pair_ratios"]
    assert f"(median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f})" in text


def test_a_ratio_target_is_met_only_when_every_pair_reaches_it():
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    quick = next(r for r in report["realistic"] if r["workload"] == "quickstart")
    quick["pair_ratios"], quick["ratio"] = [2.5, 2.1, 1.9], 2.2
    assert "| quickstart | completion tokens/s, lit-grpo / TRL | >= 2x | 2.20x (A/B pairs 1.90-2.50); paired " \
        in render_realistic(report)
    assert re.search(r"A/B pairs 1\.90-2\.50\); [^|]*\| \*\*no\*\* \|", render_realistic(report))
    quick["pair_ratios"] = [2.5, 2.1, 2.0]
    assert re.search(r"\| >= 2x \| 2\.20x \(A/B pairs 2\.00-2\.50\); [^|]*\| yes \|", render_realistic(report))


def test_a_report_with_the_new_fields_renders_them():
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    state = {"load": [0.1, 0.2, 0.3], "mem_total_mib": 24576.0, "mem_available_mib": 20480.0,
             "others_rss_mib": 512.0, "top_others": [{"pid": 9, "name": "sshd", "rss_mib": 512.0}]}
    report["meta"].update(machine_start=state, machine_end=state, busy=[])
    report["realistic_peak"] = {"fp32": 100.0, "bf16": 50.0, "device": "cpu"}
    phase = {"gflop": 12.0, "gflops": 40.0, "peak_frac": 0.4}
    for r in report["realistic"]:
        r["same_prompts"] = True
        for side in ("lit", "trl"):
            r[side]["roofline"] = {"generation": phase, "training": phase, "step": phase}
    text = render_realistic(report)
    assert "Machine at the start: load 0.10/0.20/0.30, MemAvailable 20.0 of 24.0 GiB" in text
    assert "during a measuring process): never." in text
    assert "fp32 100.0 GFLOP/s on cpu" in text and "| real | lit-grpo | " + " | ".join(["12.00 | 40.0 | 40.0%"] * 3) in text
    assert "quickstart yes, real yes" in text


def test_a_headline_ratio_states_its_paired_estimate_and_its_step_time_ratio():
    """The geometric mean of the pairs' ratios with its t interval, and TRL's step time over lit-grpo's
    beside the tokens/s ratio (they differ where the sides' completions differ in length)."""
    gm, (low, high) = paired_ratio([2.0, 8.0])
    assert gm == pytest.approx(4.0) and low * high == pytest.approx(16.0)  # symmetric around the mean of the logs
    assert paired_ratio([3.0]) == (pytest.approx(3.0), None)
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    lora = next(r for r in report["realistic"] if r["workload"] == "lora")
    gm, (low, high) = paired_ratio(lora["pair_ratios"])
    step_gm, (step_low, step_high) = paired_ratio(lora["pair_step_ratios"])  # paired like the tokens/s
    by_step = f"{step_gm:.2f}x [{step_low:.2f}, {step_high:.2f}]"
    text = render_realistic(report)
    assert f"paired {gm:.2f}x [{low:.2f}, {high:.2f}]; by step time {by_step} | yes |" in text
    assert f"| {lora['lit']['tokens']:.0f} / {lora['trl']['tokens']:.0f} | {by_step} |" in text
    # the step-time target: every pair's ratio, read beside the tokens/s one
    met = "yes" if min(lora["pair_step_ratios"]) >= 4 else "**no**"
    assert f"| lora | step time, TRL + peft / lit-grpo | >= 4x | {by_step} (A/B pairs " in text
    assert re.search(r"\| lora \| step time, [^\n]*\| " + re.escape(met) + r" \|", text)
    # a run that recorded no pair's step times: the ratio of the medians, said so
    del lora["pair_step_ratios"]
    medians = f"{lora['trl']['step_s'] / lora['lit']['step_s']:.2f}x"
    text = render_realistic(report)
    assert f"by step time {medians} | yes |" in text and f"| >= 4x | {medians} (the medians' ratio) |" in text


def test_an_adapter_workload_says_what_it_trains_and_is_held_to_its_own_target():
    def without_adapters() -> dict:  # the committed run, its adapter workload left out
        report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
        report["realistic"] = [r for r in report["realistic"] if not r.get("lora")]
        return report

    assert "with adapters" not in render_realistic(without_adapters())
    report = without_adapters()
    real = next(r for r in report["realistic"] if r["workload"] == "real")
    real.update(workload="lora", lora=workloads.LORA, pair_ratios=[4.5, 3.9], ratio=4.2)
    real["lit"]["trainable"] = 4_884_480
    text = render_realistic(report)
    assert f"| lora: smollm2-135m-instruct ({real['lit']['params'] / 1e6:.1f}M, LoRA r16 on 7 projections: 4.9M " \
        "trained) |" in text
    assert "| lora | completion tokens/s, lit-grpo / TRL + peft | >= 4x | 4.20x (A/B pairs 3.90-4.50); paired " in text
    assert "with adapters 2 forwards through the frozen weights" in text


def test_unknown_realistic_workloads_are_refused_with_the_known_ones():
    import subprocess

    for args in (["--parts", "realistic", "--workloads", "lora,nope"], ["--workloads", "lora"]):
        proc = subprocess.run([sys.executable, "-m", "bench.grpo_step", *args], capture_output=True,
                              text=True, cwd=ROOT)
        assert proc.returncode == 2
        assert "needs --parts realistic or tta and names of quickstart, real, lora" in proc.stderr


def test_the_realistic_plan_times_at_least_ten_steps_a_process():
    assert all(steps >= 10 and pairs >= 2 for _, pairs, _, steps in run.plan(False)["realistic"])


def test_publishing_a_report_recorded_busy_is_refused_unless_allowed(tmp_path, monkeypatch):
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    report["meta"]["busy"] = ["trl smollm2 (real): other processes hold 9000 MiB resident"]
    doc = tmp_path / "performance.md"
    monkeypatch.setitem(run.RUN, "allow_busy", False)
    with pytest.raises(SystemExit, match="(?s)refusing to write into .*9000 MiB.*--allow-busy"):
        run.publish(report, ["realistic", "tta"], doc, tmp_path / "saved.json")
    assert (tmp_path / "saved.json").exists() and not doc.exists()  # the data is kept, the docs untouched
    monkeypatch.setitem(run.RUN, "allow_busy", True)
    run.publish(report, ["realistic", "tta"], doc, None)
    assert "1 times (published with --allow-busy)" not in doc.read_text()  # not forced: allow_busy not in meta
    assert "other processes hold 9000 MiB" in doc.read_text()


def test_the_trl_runner_reads_the_prompts_in_the_order_lit_grpo_draws_them(monkeypatch):
    """train_order against the batches a Lightning fit of the same data module draws, across data epochs."""
    import lightning as L
    import torch

    from lit_grpo import PromptDataModule
    from lit_grpo.data.sources import PromptSource

    class Ten(PromptSource):
        def load(self, split):
            return [{"prompt": f"{split} {i}", "reference": str(i), "id": f"{split}-{i}", "columns": {}}
                    for i in range(10 if split == "train" else 0)]

    monkeypatch.setattr(workloads, "source", lambda workload, model: Ten())
    seen: list[str] = []

    class Record(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, batch_idx):
            seen.extend(batch.prompts)
            return (self.w * 0).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0, accelerator="cpu")
    trainer.fit(Record(), datamodule=PromptDataModule(Ten(), prompts_per_step=4, seed=3))
    order = workloads.train_order("any", "any", prompts=4, steps=5, seed=3)
    assert len(seen) == 20 and [r["prompt"] for r in order] == seen  # 2 batches an epoch: 3 data epochs


def _tta_run(seed, reached, train_s, step, start=0.2):
    return {"seed": seed, "reached": reached, "step": step if reached else None, "train_s": train_s if reached else None,
            "target": start + 0.1, "evals": [{"step": 0, "train_s": 0.0, "accuracy": start}], "step_s": 2.0}


def test_time_to_accuracy_pairs_the_seeds_both_trainers_finished():
    import math

    runs = {"lit-grpo": [_tta_run(0, True, 10.0, 5), _tta_run(1, True, 20.0, 10), _tta_run(2, True, 5.0, 5)],
            "trl": [_tta_run(0, True, 40.0, 5), _tta_run(1, True, 20.0, 5), _tta_run(2, False, None, None)]}
    p = run.paired_ratios(runs)
    assert p["ratios"] == {0: 4.0, 1: 1.0} and p["reached"] == {"lit-grpo": 3, "trl": 2} and p["seeds"] == 3
    assert p["geomean"] == pytest.approx(2.0)  # exp(mean(log 4, log 1))
    half = 12.7062047 * math.log(4) / math.sqrt(2) / math.sqrt(2)  # t(0.975, 1) x sd(log ratios) / sqrt(2)
    assert p["ci95"] == pytest.approx([2.0 * math.exp(-half), 2.0 * math.exp(half)], rel=1e-6)
    one = run.paired_ratios({side: rs[:1] for side, rs in runs.items()})
    assert one["geomean"] == pytest.approx(4.0) and one["ci95"] is None
    report = {"tta": [{"workload": "lora", "seeds": [0, 1, 2], "max_steps": 60, "eval_every": 5, "gain": 0.1,
                       "samples": 4, "runs": runs, "paired": p}]}
    text = render_realistic({"meta": json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())[
        "meta"], **report})
    assert "**Time to accuracy, lora**" in text and "reaches +0.10 over the starting policy's" in text
    assert "| TRL | 40 (5) | 20 (5) | not reached (60) | 2.000 |" in text
    assert "| start (lit-grpo's evaluation at step 0) | 0.200 | 0.200 | 0.200 | |" in text
    assert (f"both reached the target: 2 of 3; reached: lit-grpo 3, TRL 2): seed 0: 4.00, seed 1: 1.00; geometric "
            f"mean **2.00x**, 95% t interval [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]") in text


def test_held_out_targets_the_start_plus_the_gain_and_evaluates_when_due():
    from bench.grpo_step.workloads import HeldOut

    accuracies = iter([0.25, 0.30, 0.36])
    held = HeldOut("lora", "unused", 32, every=5, samples=4, gain=0.1)
    held.__class__ = type("Scripted", (HeldOut,), {"__call__": lambda self, policy: next(accuracies)})
    held.start(policy=None)
    assert held.target == pytest.approx(0.35) and held.evals == [{"step": 0, "train_s": 0.0, "accuracy": 0.25}]
    assert not held.after(3, 1.0, None) and len(held.evals) == 1  # not due
    assert not held.after(5, 2.0, None) and held.after(10, 4.0, None)
    assert [e["step"] for e in held.evals] == [0, 5, 10]
    fixed = HeldOut("quickstart", "unused", 6, every=25, target=0.7)
    fixed.start(policy=None)
    assert fixed.target == 0.7 and fixed.evals == []  # a fixed target needs no start evaluation


def test_each_run_of_the_realistic_or_tta_part_names_a_block_of_its_own():
    from bench.grpo_step.run import block_name

    assert block_name(["realistic"], None) == "grpo_step.py:realistic"
    assert block_name(["realistic", "tta"], None) == "grpo_step.py:realistic"
    assert block_name(["realistic"], ("lora",)) == "grpo_step.py:realistic:lora"
    assert block_name(["tta"], None) == "grpo_step.py:realistic:tta"
    assert block_name(["tta"], ("quickstart", "lora")) == "grpo_step.py:realistic:tta_quickstart+lora"
    # every name fits the doc test's pattern and its data file name
    assert re.fullmatch(r"grpo_step\.py:realistic(:[\w+]+)?", block_name(["tta"], ("quickstart", "lora")))


def test_the_lit_grpo_side_samples_with_the_draws_of_each_workloads_published_run():
    """The benchmark sets no engine option on the real workloads (real, lora, quickstart): it measures the
    engine's defaults, whatever they are, and records them. zero pins GENERATE_DRAWS: both sides then sample
    the same tokens from one seed and run the same arithmetic."""
    from bench.grpo_step.lit_worker import ENGINE_SETTINGS, engine, engine_settings
    from lit_grpo.rollout import HFGenerateEngine
    from lit_grpo.rollout.hf import GENERATE_DRAWS

    default = HFGenerateEngine()
    for name in ("real", "lora", "quickstart"):
        assert engine_settings(engine(name)) == {key: getattr(default, key) for key in ENGINE_SETTINGS}, name
    pinned = HFGenerateEngine(**GENERATE_DRAWS)
    assert engine_settings(engine("zero")) == {key: getattr(pinned, key) for key in ENGINE_SETTINGS}
    assert (engine("zero").shrink, engine("zero").sampler) == (False, "multinomial")
    assert all(type(engine(name)) is HFGenerateEngine for name in workloads.WORKLOADS)


def test_the_held_out_yardstick_draws_generates_tokens(monkeypatch):
    """Both sides' held-out evaluations sample with GENERATE_DRAWS, as the published ones did."""
    from types import SimpleNamespace

    from lit_grpo.rollout import hf
    from lit_grpo.rollout.hf import GENERATE_DRAWS

    built = []

    class Recorder:
        def __init__(self, **options):
            built.append(options)

        def bind(self, policy, tokenizer):
            pass

        def generate(self, prompts, n, sampling):
            return SimpleNamespace(texts=["5"] * (len(prompts) * n))

    monkeypatch.setattr(hf, "HFGenerateEngine", Recorder)
    held = workloads.HeldOut("quickstart", "unused", 6, every=25, samples=4)
    held.__dict__["_scoring"] = ([{"prompt": "2+3=", "reference": "5"}], workloads.reward("quickstart"), None)
    assert held(policy=None) == 1.0
    assert built == [GENERATE_DRAWS]


def test_the_realistic_prose_says_what_the_committed_run_measured():
    """The sentences of docs/performance.md that read the realistic run (generation's share of lit-grpo's
    step and its share of the peak against TRL's; the trajectories' differences) hold for the committed
    data."""
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    runs = {r["workload"]: r for r in json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
            ["realistic"]}
    fast = [runs["real"], runs["lora"]]
    share = [r["lit"]["generate_s"] / r["lit"]["step_s"] for r in fast]
    peak = [r["lit"]["roofline"]["generation"]["peak_frac"] / r["trl"]["roofline"]["generation"]["peak_frac"]
            for r in fast]
    assert (f"takes {100 * min(share):.0f} to {100 * max(share):.0f}% of lit-grpo's step and runs at "
            f"{min(peak):.1f} to {max(peak):.1f} times TRL's share of the peak") in doc
    real, lora = runs["real"], runs["lora"]
    assert ("`real` trajectory has fewer groups of equal rewards than TRL's" in doc) == \
        (real["lit"]["zero_variance_share"] < real["trl"]["zero_variance_share"])
    assert ("its `lora` completions are longer than TRL's" in doc) == \
        (lora["lit"]["sampled_tokens"] > lora["trl"]["sampled_tokens"])
    # the LoRA step-time miss, by phase (its sentence's ratios: tests/docs/test_record.py)
    lit, trl = lora["lit"], lora["trl"]  # the phases' medians

    def train_s(x: dict) -> float:
        return x["forward_s"] + x["backward_s"]

    assert (f"its generation takes {lit['generate_s']:.1f} s of the {lit['step_s']:.1f} s step against TRL's "
            f"{trl['generate_s']:.1f} s, where its forward and backward take {train_s(lit):.1f} s against TRL's "
            f"{train_s(trl):.1f} s") in doc
    per_token = (trl["generate_s"] / trl["tokens"]) / (lit["generate_s"] / lit["tokens"])
    assert f"Per generated token lit-grpo's generation is {per_token:.1f}x TRL's" in doc
    # the quickstart's miss: where lit-grpo's step goes (means over the timed steps, from the sums)
    quick = runs["quickstart"]

    def mean_ms(side: str, key: str) -> float:
        return 1000 * quick[side]["time_sums"][key] / quick[side]["steps_timed"]

    rest = mean_ms("lit", "step_s") - sum(mean_ms("lit", p) for p in PHASES)
    assert (f"lit-grpo's mean step of {mean_ms('lit', 'step_s'):.0f} ms spends {rest:.0f} ms outside its five "
            f"phases") in doc
    assert (f"2x would take a step of {mean_ms('trl', 'step_s') / 2:.0f} ms (TRL's mean: "
            f"{mean_ms('trl', 'step_s'):.0f} ms)") in doc
    train_ms = mean_ms("lit", "forward_s") + mean_ms("lit", "backward_s")
    assert f"generation ({mean_ms('lit', 'generate_s'):.0f} ms) and training ({train_ms:.0f} ms)" in doc
    assert mean_ms("lit", "step_s") - rest > mean_ms("trl", "step_s") / 2  # "would not reach" holds


def test_the_comparison_and_scaling_prose_says_what_the_committed_run_measured():
    """The numbers the prose of docs/performance.md reads from the Results block (What the comparison shows,
    Scaling, the changes table) are those of docs/results/grpo_step.json."""
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    report = json.loads((ROOT / "docs" / "results" / "grpo_step.json").read_text())
    rows = {(r["size"], r["precision"]): r for r in report["compare"]}
    peak = report["peak"]

    def train(x: dict) -> float:
        return x["forward_s"] + x["backward_s"]

    def pct(x: dict, key: str, precision: str = "fp32") -> str:
        return f"{100 * x[key] / peak[precision]:.0f}%"

    small, medium = rows["small", "fp32"], rows["medium", "fp32"]
    expected = [
        f"spread from {small['pair_ratio']['min']:.2f} to {small['pair_ratio']['max']:.2f} (`small`) and from {medium['pair_ratio']['min']:.2f} to "
        f"{medium['pair_ratio']['max']:.2f} (`medium`)",
        f"it runs {small['lit']['train_gflop']:.1f} GFLOP a `small` step and {medium['lit']['train_gflop']:.1f} a "
        f"`medium` one against TRL's {small['trl']['train_gflop']:.1f} and {medium['trl']['train_gflop']:.1f}",
        f"({pct(small['lit'], 'train_gflops')} of the fp32 peak against {pct(small['trl'], 'train_gflops')} for "
        f"`small`, {pct(medium['lit'], 'train_gflops')} against {pct(medium['trl'], 'train_gflops')} for `medium`",
        f"Its training takes {train(small['lit']):.3f} s against {train(small['trl']):.3f} (`small`) and "
        f"{train(medium['lit']):.3f} s against {train(medium['trl']):.3f} (`medium`); generation "
        f"{small['lit']['generate_s']:.3f} s against {small['trl']['generate_s']:.3f} and "
        f"{medium['lit']['generate_s']:.3f} s against {medium['trl']['generate_s']:.3f}",
        f"The {small['ratio']:.2f}x and {medium['ratio']:.2f}x (paired over the A/B pairs:",
        "come from less work",
        f"TRL runs its whole `medium` step at {pct(medium['trl'], 'step_gflops')} of the fp32 peak measured in the "
        f"same run ({pct(small['trl'], 'step_gflops')} for `small`)",
        f"is a step of {medium['trl']['step_s'] / 2:.3f} s; lit-grpo's generation alone takes "
        f"{medium['lit']['generate_s']:.3f} s of its {medium['lit']['step_s']:.3f}, which would leave "
        f"{medium['trl']['step_s'] / 2 - medium['lit']['generate_s']:.3f} s for a training phase that takes "
        f"{train(medium['lit']):.3f} s at {pct(medium['lit'], 'train_gflops')} of the peak",
        f"reaches {peak['bf16']:.1f} GFLOP/s against {peak['fp32']:.1f} in fp32",
        f"(lit-grpo `small` {rows['small', 'bf16']['lit']['step_s']:.3f} s against fp32's {small['lit']['step_s']:.3f}, "
        f"after one warm-up step; `medium` {rows['medium', 'bf16']['lit']['step_s']:.3f} s against "
        f"{medium['lit']['step_s']:.3f},",
    ]
    bf16 = [100 * rows[size, "bf16"][side]["train_gflops"] / peak["bf16"] for size in ("small", "medium")
            for side in ("lit", "trl")]
    expected.append(f"training reaches {min(bf16):.0f} to {max(bf16):.0f}% of the bf16 peak")
    shares = [r["lit"]["generate_s"] / r["lit"]["step_s"] for r in (small, medium)]
    expected.append(f"Generation is {100 * shares[0]:.0f}% of lit-grpo's `small` step and {100 * shares[1]:.0f}% "
                    f"of its `medium` one, so even free generation would make a step at most "
                    f"{1 / (1 - shares[0]):.1f}x and {1 / (1 - shares[1]):.1f}x faster")
    expected.append(f"optimizer phase (clip + step) {small['lit']['optimizer_s']:.3f} s (`small`) and "
                    f"{medium['lit']['optimizer_s']:.3f} s (`medium`)")
    memory = [m["peak_rss_mib"] for m in report["memory"]]
    expected.append(f"vocabulary {memory[1]:.0f} -> {memory[0]:.0f} MiB (TRL {memory[2]:.0f};")

    def series(rs: list[dict], f) -> str:
        return ", ".join(f"{f(r):.3f}" for r in rs)

    scaling = report["scaling"]
    for key in ("G", "P"):
        rs = scaling[key]
        expected += [series(rs, lambda r: r["step_s"]), series(rs, train), series(rs, lambda r: r["generate_s"])]
    g = scaling["G"]
    expected.append(f"{g[-1]['tokens'] / g[0]['tokens']:.1f}x the tokens for {g[-1]['step_s'] / g[0]['step_s']:.1f}x "
                    "the time")
    p = scaling["P"]
    expected.append(f"({p[0]['step_s'] * 1000 / p[0]['tokens']:.2f} down to {p[-1]['step_s'] * 1000 / p[-1]['tokens']:.2f} ms)")
    tiny, small_, medium_ = scaling["size"]
    expected.append(f"`tiny` -> `small` is {small_['params'] / tiny['params']:.1f}x the parameters for "
                    f"{small_['step_s'] / tiny['step_s']:.1f}x the time, `small` -> `medium` "
                    f"{medium_['params'] / small_['params']:.1f}x for {medium_['step_s'] / small_['step_s']:.1f}x")
    expected.append(f"its training runs at {pct(medium['lit'], 'train_gflops')} of the fp32 peak in the comparison")
    missing = [e for e in expected if e not in doc]
    assert not missing, f"docs/performance.md no longer says what docs/results/grpo_step.json measured: {missing}"


def test_the_lora_time_to_accuracy_prose_says_where_the_runs_reached_the_target():
    """The sentence that reads the lora time to accuracy as a ratio of 5 steps' time holds only while every
    run of both trainers reached the target at the first evaluation."""
    doc = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    tta = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic-tta_lora.json").read_text())["tta"][0]
    first = all(r["reached"] and r["step"] == tta["eval_every"] for runs in tta["runs"].values() for r in runs)
    says = (f"In (c) every seed of both trainers reached the target at the first evaluation (step "
            f"{tta['eval_every']})") in doc
    assert says == first, "performance.md's reading of the lora time to accuracy disagrees with its data"


def _process(tokens_per_s: float, step_s: float) -> dict:
    """A measuring process's result with two timed steps of the given rates (its medians)."""
    return {"steps": [{"tokens_per_s": tokens_per_s, "step_s": step_s}] * 2}


def test_each_ab_pair_gives_a_tokens_per_s_ratio_and_a_step_time_ratio():
    # pair 1: lit-grpo 300 tokens/s at 2 s a step, TRL 100 at 4 s (its completions shorter); pair 2: 200 at 3,
    # 100 at 3
    runs = {"lit-grpo": [_process(300.0, 2.0), _process(200.0, 3.0)],
            "trl": [_process(100.0, 4.0), _process(100.0, 3.0)]}
    out = run.pair_ratios(runs)
    assert out["pair_ratios"] == [3.0, 2.0]
    assert out["pair_step_ratios"] == [2.0, 1.0]  # TRL's step time over lit-grpo's
    assert out["pair_ratio"] == {"median": 2.5, "min": 2.0, "max": 3.0, "pairs": 2}


def test_paired_ratio_is_the_geometric_mean_with_a_t_interval_on_the_logs():
    import math

    ratios = [6.32, 6.22, 6.69]
    logs = [math.log(r) for r in ratios]
    mean, sd = sum(logs) / 3, statistics.stdev(logs)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    gm, (low, high) = paired_ratio(ratios)
    assert gm == pytest.approx(math.exp(mean)) and (low, high) == pytest.approx((math.exp(mean - half),
                                                                                  math.exp(mean + half)))
    with pytest.raises(ValueError, match="positive ratios"):
        paired_ratio([2.0, 0.0])
    with pytest.raises(ValueError, match="positive ratios"):
        paired_ratio([])


def test_a_run_that_recorded_its_pairs_step_times_renders_the_step_ratio_paired():
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    for r in report["realistic"]:  # as a run before the pairs' step times were recorded
        r.pop("pair_step_ratios", None)
    old = render_realistic(report)
    assert "ratio of the two sides' median step times (this run did not record it per pair)" in old
    lora = next(r for r in report["realistic"] if r["workload"] == "lora")
    lora["pair_step_ratios"] = [3.6, 4.0, 3.9]
    for r in report["realistic"]:
        r.setdefault("pair_step_ratios", [1.5, 1.6, 1.55])
    gm, (low, high) = paired_ratio([3.6, 4.0, 3.9])
    text = render_realistic(report)
    tokens = f"| {lora['lit']['tokens']:.0f} / {lora['trl']['tokens']:.0f} |"
    assert f"{tokens} {gm:.2f}x [{low:.2f}, {high:.2f}] |" in text
    assert f"; by step time {gm:.2f}x [{low:.2f}, {high:.2f}] | yes |" in text
    assert "The ratio by step time is paired the same way" in text


def test_the_settings_a_run_recorded_are_rendered_beside_the_throughput():
    report = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())
    for r in report["realistic"]:  # as a run before the settings were recorded
        r.pop("cpu_flags", None)
        for side in ("lit", "trl"):
            for key in ("dtype", "autocast", "engine", "trl_settings"):
                r[side].pop(key, None)
    assert ("Settings (the CPU's flags, each side's dtype, lit-grpo's engine, TRL's settings): not recorded"
            in render_realistic(report))
    for r in report["realistic"]:
        r["cpu_flags"] = {"avx2": True, "avx512_bf16": True, "amx_bf16": False, "amx_tile": False}
        r["lit"].update(dtype="float32", autocast=None,
                        engine={"decoder": "own", "shrink": True, "sampler": "inverse_cdf"})
        r["trl"].update(dtype="float32", autocast="bf16", trl_settings={"loss_type": "dapo", "beta": 0.0})
    text = render_realistic(report)
    assert ("| lora | avx2 yes, avx512_bf16 yes, amx_bf16 no, amx_tile no | float32 | float32 (bf16 autocast) "
            "| decoder own, shrink True, sampler inverse_cdf | loss_type dapo, beta 0.0 |") in text


def test_the_headline_rows_of_the_doc_are_their_json_as_paired_estimates():
    """Each headline row against TRL (realistic, LoRA, quickstart) in docs/performance.md states its
    tokens/s ratio, its paired estimate and its step-time ratio as the committed JSON gives them,
    recomputed here from the pairs."""
    import math

    from lit_grpo.lab.stats import t_quantile

    doc = (ROOT / "docs" / "performance.md").read_text()
    rows = json.loads((ROOT / "docs" / "results" / "grpo_step_realistic.json").read_text())["realistic"]
    for r in rows:
        logs = [math.log(x) for x in r["pair_ratios"]]
        mean, n = statistics.fmean(logs), len(logs)
        half = t_quantile(0.975, n - 1) * statistics.stdev(logs) / math.sqrt(n)
        step = r.get("pair_step_ratios")
        by_step = f"{r['trl']['step_s'] / r['lit']['step_s']:.2f}x" if step is None else (
            f"{paired_ratio(step)[0]:.2f}x")
        pairs = f"{min(r['pair_ratios']):.2f}-{max(r['pair_ratios']):.2f}"
        interval = f"[{math.exp(mean - half):.2f}, {math.exp(mean + half):.2f}]"
        line = (f"{r['ratio']:.2f}x (A/B pairs {pairs}); paired {math.exp(mean):.2f}x {interval}; by step "
                f"time {by_step}")
        assert f"| {r['workload']} | completion tokens/s" in doc and line in doc, (
            f"docs/performance.md's {r['workload']} headline disagrees with "
            "docs/results/grpo_step_realistic.json: python -m bench.grpo_step --render "
            "docs/results/grpo_step_realistic.json --write docs/performance.md")
