"""The report of ``bench/grpo_step.py``: FLOP counts, the markdown tables and writing them into a doc."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from grpo_step_common import PHASES
from grpo_step_machine import describe

from lit_grpo.lab.stats import t_quantile

LARGE_VOCAB = 151_936  # Qwen2/2.5's vocabulary size


# ---- FLOPs --------------------------------------------------------------------------------------------------
def model_config(model: str | dict) -> dict:
    """A model's ``config.json`` (``model``: its directory, or the config itself)."""
    return model if isinstance(model, dict) else json.loads((Path(model) / "config.json").read_text())


def _projections(c: dict) -> dict[str, tuple[int, int]]:
    """Each block projection's (input, output) width."""
    h, ffn = c["hidden_size"], c["intermediate_size"]
    head = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = head * c["num_attention_heads"], head * c["num_key_value_heads"]
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, ffn),
            "up_proj": (h, ffn), "down_proj": (ffn, h)}


def forward_parts(model: str | dict, prompt_tokens: float, completion_tokens: float, sequences: int,
                  context: float | None = None, lora: dict | None = None) -> dict[str, float]:
    """Model FLOPs of one forward over a step's real tokens, by part: ``weights``, ``2 * matmul weights`` per
    token through the blocks (q, k, v, o and the gated MLP: ``L (2 H Hq + 2 H Hkv + 3 H F)``, ``Hq`` = heads x
    head dim, ``Hkv`` = key-value heads x head dim); ``head``, ``2 * V * H`` per completion token through the LM
    head (one logits row per completion token); ``attention``, ``4 * L * Hq`` per attended key for attention
    scores and values; ``adapters``, with ``lora`` (``{"r": ..., "target_modules": [...]}``), ``2 r (in + out)``
    per token through each adapted projection of every layer, else 0. ``context``: the keys attended over all
    those tokens (``*_context`` of ``group_counts``); without it, the causal average over ``sequences``
    mean-length sequences."""
    c = model_config(model)
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    widths = _projections(c)
    block = layers * sum(i * o for i, o in widths.values())  # L (2 H Hq + 2 H Hkv + 3 H F)
    tokens = prompt_tokens + completion_tokens
    if context is None:
        length = tokens / max(sequences, 1)
        context = tokens * (length + 1) / 2
    adapted = sum(i + o for name, (i, o) in widths.items() if name in (lora or {}).get("target_modules", ()))
    return {"weights": 2 * block * tokens, "head": 2 * vocab * h * completion_tokens,
            "attention": 4 * layers * widths["q_proj"][1] * context,
            "adapters": 2 * (lora or {}).get("r", 0) * layers * adapted * tokens}


def forward_flops(model: str | dict, prompt_tokens: float, completion_tokens: float, sequences: int,
                  context: float | None = None) -> float:
    """Model FLOPs of one forward over a step's real tokens: the sum of :func:`forward_parts` (no adapters)."""
    return sum(forward_parts(model, prompt_tokens, completion_tokens, sequences, context).values())


def training_flops(model: str | dict, prompt_tokens: float, completion_tokens: float, sequences: int,
                   context: float | None = None, lora: dict | None = None) -> float:
    """FLOPs of a forward and backward over the tokens. Every weight trained: 3 forwards (the backward computes
    the gradients of the activations and of the weights). With ``lora`` the frozen weights and LM head need only
    the activations' gradients, 2 forwards of them (within the first layer's input gradients, which nothing
    needs); attention and the adapters 3 forwards."""
    f = forward_parts(model, prompt_tokens, completion_tokens, sequences, context, lora)
    frozen = 2 if lora else 3
    return frozen * (f["weights"] + f["head"]) + 3 * (f["attention"] + f["adapters"])


def useful_flops(model: str | dict, sums: dict[str, float], steps: int, lora: dict | None = None,
                 ) -> dict[str, float] | None:
    """Useful GFLOP per step of each phase, from the counts of ``steps`` steps summed (``None`` for a run that
    did not count the attention context). ``generation``: one forward over every group's prompt once (its
    prefill) and every sampled token (its decode; one position a row more than strictly needed, as the last
    sampled token is never fed back), the LM head on every sampled token, adapters folded into the weights (none
    counted); ``training``: :func:`training_flops` over the useful rows (groups whose rewards differ) with each
    prompt once; ``step``: both."""
    if "sampled_context" not in sums:
        return None
    gen = forward_flops(model, sums["sampled_prompt_tokens"], sums["sampled_tokens"], 0, sums["sampled_context"])
    train = training_flops(model, sums["useful_prompt_tokens"], sums["useful_tokens"], 0, sums["useful_context"],
                           lora)
    per_step = 1e9 * max(steps, 1)
    return {"generation": gen / per_step, "training": train / per_step, "step": (gen + train) / per_step}


def roofline(gflop: dict[str, float], seconds: dict[str, float], peak_gflops: float | None) -> dict[str, dict]:
    """Per phase: useful GFLOP per step, GFLOP/s over the phase's time per step (``generation``: ``generate_s``,
    ``training``: ``forward_s + backward_s``, ``step``: ``step_s``) and the fraction of the matmul peak
    (``None`` without a peak)."""
    times = {"generation": seconds["generate_s"], "training": seconds["forward_s"] + seconds["backward_s"],
             "step": seconds["step_s"]}
    out = {}
    for phase, flop in gflop.items():
        rate = flop / times[phase] if times[phase] > 0 else 0.0
        out[phase] = {"gflop": flop, "gflops": rate, "peak_frac": rate / peak_gflops if peak_gflops else None}
    return out


FLOP_LABELS = {
    "every row": "**FLOP/s against the matmul peak** (training = forward + backward FLOPs over their time; step = "
                 "training plus generation over the whole step; every row counted with its prompt):",
    "executed": "**FLOP/s against the matmul peak** (training: the forward + backward FLOPs each trainer ran, over "
                "their time, each prompt counted as often as the trainer encoded it; step: those plus generation's "
                "useful FLOPs, each prompt once and every sampled token, over the whole step):",
}


def flop_rates(model_dir: str | dict, row: dict, sequences: int) -> dict[str, float]:
    """Training FLOP/s and whole-step FLOP/s of a run's row (per-step counts). Training: the FLOPs the trainer ran
    forward and backward (:func:`training_flops` over the rows it trained, each prompt as often as it encoded it:
    once a group with lit-grpo's shared prefix, once a row in TRL), over their time. Step: those plus generation's
    useful FLOPs (one forward over each group's prompt once and every sampled token, as :func:`useful_flops`
    counts it, the same for both trainers) over the step's wall time. A row without those counts (a run before
    they were recorded): one forward over every row's prompt and completion, 3 for training and 1 more for
    generation."""
    executed = "trained_prompt_tokens" in row and "sampled_context" in row
    if executed:
        train = training_flops(model_dir, row["trained_prompt_tokens"], row["trained_tokens"], row["trained_rows"],
                               row.get("trained_context"))
        gen = forward_flops(model_dir, row["sampled_prompt_tokens"], row["sampled_tokens"], 0, row["sampled_context"])
    else:
        fwd = forward_flops(model_dir, row["prompt_tokens"], row["tokens"], sequences)
        train, gen = 3 * fwd, fwd
    train_s = row["forward_s"] + row["backward_s"]
    return {
        "train_gflop": train / 1e9,
        "train_gflops": train / train_s / 1e9,
        "step_gflops": (train + gen) / row["step_s"] / 1e9,
        "flop_count": "executed" if executed else "every row",
    }


def work_flops(model_dir: str, sums: dict[str, float], steps: int, lora: dict | None = None) -> dict[str, float]:
    """Training GFLOP per step (:func:`training_flops`) over the tokens a trainer ran (``executed``) and over the
    useful ones (rows of groups whose rewards differ, each prompt once), from the summed counts of ``steps``
    steps (with the exact attention context where the run counted it)."""
    def gflop(prefix: str, rows: str) -> float:
        flops = training_flops(model_dir, sums[f"{prefix}_prompt_tokens"], sums[f"{prefix}_tokens"], sums[rows],
                               sums.get(f"{prefix}_context"), lora)
        return flops / max(steps, 1) / 1e9

    return {
        "executed_gflop": gflop("trained", "trained_rows"),
        "useful_gflop": gflop("useful", "useful_rows"),
        "zero_variance_share": 1 - sums["mixed_groups"] / max(sums["groups"], 1),
    }


# ---- the report ---------------------------------------------------------------------------------------------
def _measured(m: dict) -> str:
    """The line that says when, how and on what a report was measured."""
    return (f"Measured {m['date']} with `{m['command']}` on {m['cpu']}, {m['threads']} threads; torch "
            f"{m['torch']}, transformers {m['transformers']}, TRL {m.get('trl', 'not run')}. Load average "
            f"(1 min) {m['load_before']} before and {m['load_after']} after; {m['elapsed_min']:.1f} min in all.\n\n"
            f"Machine at the start: {describe(m.get('machine_start'))}; at the end: {describe(m.get('machine_end'))}. "
            f"Busy by the rule of `bench/grpo_step_machine.py` (before the run or during a measuring process): "
            f"{_busy(m)}.")


def _busy(m: dict) -> str:
    if "busy" not in m:
        return "not recorded"
    if not m["busy"]:
        return "never"
    forced = " (published with --allow-busy)" if m.get("allow_busy") else ""
    return f"{len(m['busy'])} times{forced}: " + "; ".join(m["busy"])


def render(report: dict) -> str:
    lines = [_measured(report["meta"]), ""]
    peak = report.get("peak")
    if peak:
        lines += [
            f"Matmul peak (best of `torch.matmul` and `F.linear` on square n = 256..2048): **fp32 {peak['fp32']:.1f} GFLOP/s**, "
            f"**bf16 {peak['bf16']:.1f} GFLOP/s**.",
            "",
        ]
    if report.get("compare"):
        lines += [
            "**Throughput** (completion tokens per second over whole steps; median, range of the "
            "per-process medians in brackets):",
            "",
            "| model | precision | P x G x new tokens | lit-grpo tokens/s | TRL tokens/s | ratio | "
            "ratio per A/B pair | lit-grpo s/step | TRL s/step | " + PAIRED_HEADER + " |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["compare"]:
            lines.append(
                f"| {r['size']} ({r['lit']['params'] / 1e6:.1f}M) | {r['precision']} | "
                f"{r['prompts']} x {r['group']} x {r['new_tokens']} | {_throughput_cells(r)} | {_paired_cells(r)} |"
            )
        lines += ["", PAIRED_NOTE]
        lines += [
            "",
            "**Phases** (median seconds per step; train = forward + backward; peak RSS of the process):",
            "",
            "| model | precision | trainer | generate | score | forward | backward | optimizer | step | "
            "peak RSS MiB | timed steps |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["compare"]:
            for side, name in (("lit", "lit-grpo"), ("trl", "TRL")):
                x = r[side]
                lines.append(
                    f"| {r['size']} | {r['precision']} | {name} | "
                    + " | ".join(f"{x[p]:.3f}" for p in [*PHASES, "step_s"])
                    + f" | {x['peak_rss_mib']:.0f} | "
                    f"{x['steps_timed']} in {x['processes']} processes |"
                )
        if peak:
            lines += [
                "",
                FLOP_LABELS[report["compare"][0]["lit"].get("flop_count", "every row")],
                "",
                "| model | precision | trainer | train GFLOP/step | train GFLOP/s | % of peak | "
                "step GFLOP/s | % of peak |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for r in report["compare"]:
                top = peak[r["precision"]]
                for side, name in (("lit", "lit-grpo"), ("trl", "TRL")):
                    x = r[side]
                    lines.append(
                        f"| {r['size']} | {r['precision']} | {name} | {x['train_gflop']:.1f} | "
                        f"{x['train_gflops']:.1f} | {100 * x['train_gflops'] / top:.0f}% | "
                        f"{x['step_gflops']:.1f} | {100 * x['step_gflops'] / top:.0f}% |"
                    )
    if report.get("memory"):
        r0 = report["memory"][0]
        lines += [
            "",
            f"**Memory at a {LARGE_VOCAB:,}-token vocabulary** (the `small` model with that vocabulary, "
            f"{r0['params'] / 1e6:.0f}M parameters, P = {r0['prompts']} x G = {r0['group']}, {r0['new_tokens']} new "
            "tokens, "
            "fp32; peak RSS over the whole process, RSS once the model is loaded; s/step: the median of "
            f"{r0.get('steps', 1)} timed step(s) after {r0.get('warmup', 0)} warm-up step(s), where the chunked head "
            "recomputes each chunk's logits in the backward pass, one more LM-head matmul than the whole-logits path):",
            "",
            "| trainer | peak RSS MiB | RSS after load MiB | peak - load MiB | s/step |",
            "|---|---|---|---|---|",
        ]
        for r in report["memory"]:
            lines.append(
                f"| {r['name']} | {r['peak_rss_mib']:.0f} | {r['load_rss_mib']:.0f} | "
                f"{r['peak_rss_mib'] - r['load_rss_mib']:.0f} | {r['step_s']:.1f} |"
            )
    scaling = report.get("scaling")
    if scaling:
        lines += [
            "",
            "**Scaling** (lit-grpo, fp32, 16 new tokens; ms per completion token = step time / completion "
            "tokens):",
            "",
            "| varied | P | G | size | completion tokens | s/step | ms per token | "
            "generate s | forward s | backward s | optimizer s |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for key in ("G", "P", "size"):
            for r in scaling[key]:
                lines.append(
                    f"| {key} | {r.get('P', 8)} | {r.get('G', 8)} | {r.get('size', 'small')} | "
                    f"{r['tokens']:.0f} | {r['step_s']:.3f} | {1000 * r['step_s'] / r['tokens']:.2f} | "
                    f"{r['generate_s']:.3f} | {r['forward_s']:.3f} | {r['backward_s']:.3f} | "
                    f"{r['optimizer_s']:.3f} |"
                )
    return "\n".join(lines) + "\n"


def _roofline_table(rows: list[dict], peak: dict | None) -> list[str]:
    """Useful GFLOP per step of each phase, its GFLOP/s and its share of the matmul peak of the same run."""
    top = f"fp32 {peak['fp32']:.1f} GFLOP/s on {peak['device']}" if peak else "not recorded"
    lines = [
        "",
        "**Roofline** (useful FLOPs per step and their rate over each phase's time, against the matmul peak "
        f"measured in the same run: {top}; generation = a forward over every prompt once and every sampled "
        "token; training = 3 forwards over the useful rows, each prompt once" + (
            " (with adapters 2 through the frozen weights and LM head)" if any(r.get("lora") for r in rows) else "")
        + "; step = both over the whole step):",
        "",
        "| workload | trainer | generation GFLOP | GFLOP/s | % of peak | training GFLOP | GFLOP/s | % of peak | "
        "step GFLOP | GFLOP/s | % of peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, name, x in _sides(rows):
        cells = []
        for phase in ("generation", "training", "step"):
            y = (x.get("roofline") or {}).get(phase)
            if y is None:
                cells += ["not recorded"] * 3
                continue
            share = f"{100 * y['peak_frac']:.1f}%" if y["peak_frac"] is not None else "not recorded"
            cells += [f"{y['gflop']:.2f}", f"{y['gflops']:.1f}", share]
        lines.append(f"| {r['workload']} | {name} | " + " | ".join(cells) + " |")
    return lines


#: (workload, what, the figure's key, target): the figures the project aims at, read against each run
TARGETS = (
    ("real", "completion tokens/s, lit-grpo / TRL", "ratio", 6.0),
    ("real", "the whole step's useful FLOPs, share of the matmul peak", "step_peak", 0.60),
    ("quickstart", "completion tokens/s, lit-grpo / TRL", "ratio", 2.0),
    ("lora", "completion tokens/s, lit-grpo / TRL + peft", "ratio", 4.0),
)


def _targets_table(rows: list[dict]) -> list[str]:
    """Each target of :data:`TARGETS` whose workload the run measured, its measured figure and whether it is met."""
    lines = ["", "**Against the targets** (a ratio's target is met when every A/B pair reaches it):", "",
             "| workload | figure | target | measured | met |", "|---|---|---|---|---|"]
    by_name = {r["workload"]: r for r in rows}
    for workload, what, key, target in TARGETS:
        r = by_name.get(workload)
        if r is None:
            continue
        if key == "ratio":
            value, ratios = r["ratio"], r["pair_ratios"]
            shown = (f"{value:.2f}x (A/B pairs {min(ratios):.2f}-{max(ratios):.2f}); paired {_paired(r)}; "
                     f"by step time {_by_step(r):.2f}x")
            wanted, met = f">= {target:.0f}x", min(ratios) >= target
        else:
            step = (r["lit"].get("roofline") or {}).get("step") or {}
            value = step.get("peak_frac")
            if value is None:
                continue
            shown, wanted, met = f"{100 * value:.1f}%", f">= {100 * target:.0f}%", value >= target
        lines.append(f"| {workload} | {what} | {wanted} | {shown} | {'yes' if met else '**no**'} |")
    return lines


def write_into(path: Path, text: str, name: str = "grpo_step.py") -> None:
    """Replace what lies between the begin and end markers ``<!-- {name}:begin/end -->`` in ``path`` (appended
    when absent)."""
    BEGIN, END = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    doc = path.read_text() if path.exists() else ""
    block = f"{BEGIN}\n{text}{END}"
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + block + doc[doc.index(END) + len(END) :]
    else:
        doc = doc + ("\n" if doc else "") + block + "\n"
    path.write_text(doc)


def _tta_table(tta: dict) -> list[str]:
    """One workload's time to accuracy: per seed and trainer the training seconds (and steps) until the target,
    and per seed the paired ratio TRL / lit-grpo with its geometric mean and 95% interval."""
    kind = f"sampled accuracy ({tta['samples']} completions a prompt)" if tta["samples"] else "greedy accuracy"
    goal = f"{tta['gain']:+.2f} over the starting policy's" if "gain" in tta else f"{tta['target']:.2f}"
    seeds = [r["seed"] for r in tta["runs"]["lit-grpo"]]
    lines = ["", f"**Time to accuracy, {tta['workload']}** (training seconds, evaluations and set-up excluded, until "
             f"held-out {kind} on the validation prompts first reaches {goal}; evaluated every {tta['eval_every']} "
             f"steps, at most {tta['max_steps']} steps; the step count in brackets):", "",
             "| trainer | " + " | ".join(f"seed {s}" for s in seeds) + " | s/step (median) |",
             "|---|" + "---|" * (len(seeds) + 1)]
    for runner, name in (("lit-grpo", "lit-grpo"), ("trl", "TRL")):
        rs = tta["runs"][runner]
        cells = [f"{r['train_s']:.0f} ({r['step']})" if r["reached"] else f"not reached ({tta['max_steps']})" for r in rs]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {statistics.median(r['step_s'] for r in rs):.3f} |")
    if "gain" in tta:
        starts = [f"{r['evals'][0]['accuracy']:.3f}" for r in tta["runs"]["lit-grpo"]]
        lines.append("| start (lit-grpo's evaluation at step 0) | " + " | ".join(starts) + " | |")
    p = tta["paired"]
    ratios = ", ".join(f"seed {s}: {r:.2f}" for s, r in p["ratios"].items()) or "none"
    line = (f"Paired by seed, TRL's time / lit-grpo's (seeds where both reached the target: {len(p['ratios'])} of "
            f"{p['seeds']}; reached: lit-grpo {p['reached']['lit-grpo']}, TRL {p['reached']['trl']}): {ratios}")
    if p["geomean"] is not None:
        line += f"; geometric mean **{p['geomean']:.2f}x**"
        line += f", 95% t interval [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]" if p["ci95"] else " (one pair: no interval)"
    return lines + ["", line + "."]


def _adapters(r: dict) -> str:
    """``, LoRA r16 on 7 projections: 4.9M trained`` for a workload that trains adapters, else nothing."""
    lora = r.get("lora")
    if not lora:
        return ""
    trained = r["lit"].get("trainable")
    return (f", LoRA r{lora['r']} on {len(lora['target_modules'])} projections"
            + (f": {trained / 1e6:.1f}M trained" if trained else ""))


def _throughput_cells(r: dict) -> str:
    """The cells both throughput tables share: tokens/s of each side with its range, the ratio, the ratio per A/B
    pair, seconds per step of each side."""
    lit, trl = r["lit"], r["trl"]
    ratios = r["pair_ratios"]
    pairs = ", ".join(f"{x:.2f}" for x in ratios)
    if len(ratios) > 1:
        pairs += f" (median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f})"
    return (f"{lit['tokens_per_s']:.0f} [{lit['tps_min']:.0f}-{lit['tps_max']:.0f}] | {trl['tokens_per_s']:.0f} "
            f"[{trl['tps_min']:.0f}-{trl['tps_max']:.0f}] | **{r['ratio']:.2f}x** | {pairs} | {lit['step_s']:.3f} | "
            f"{trl['step_s']:.3f}")


def paired_ratio(ratios: list[float]) -> tuple[float, tuple[float, float] | None]:
    """The paired estimate of a ratio: the geometric mean of the A/B pairs' ratios and its 95% t interval (on the
    logs, over the pairs; None with one pair)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None
    half = t_quantile(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def _paired(r: dict) -> str:
    """``6.41x [5.83, 7.04]``: the paired estimate of a row's tokens/s ratio."""
    gm, ci = paired_ratio(r["pair_ratios"])
    return f"{gm:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (one pair)")


PAIRED_HEADER = ("paired ratio: geometric mean [95% t] | completion tokens a step, lit-grpo / TRL | ratio by step "
                 "time, TRL / lit-grpo")
PAIRED_NOTE = ("The paired ratio is the geometric mean of the A/B pairs' tokens/s ratios with its 95% t interval over "
               "the pairs. Each side's samples are its own, so where their completions differ in length the tokens/s "
               "ratio and the ratio of the step times differ too: a longer completion spreads a step's fixed costs "
               "over more tokens. Both are shown; neither alone is the speed of the code.")


def _paired_cells(r: dict) -> str:
    """The cells of :data:`PAIRED_HEADER`."""
    return f"{_paired(r)} | {r['lit']['tokens']:.0f} / {r['trl']['tokens']:.0f} | {_by_step(r):.2f}x"


def _by_step(r: dict) -> float:
    """TRL's median step time over lit-grpo's: the ratio of the work a step's own samples ask for, which differs
    from the tokens/s ratio where the two sides' completions differ in length."""
    return r["trl"]["step_s"] / r["lit"]["step_s"]


def _sides(rows: list[dict]):
    """``(row, trainer name, that trainer's numbers)`` for each row, lit-grpo first."""
    for r in rows:
        for side, name in (("lit", "lit-grpo"), ("trl", "TRL")):
            yield r, name, r[side]


def render_realistic(report: dict) -> str:
    """The tables of the ``realistic`` and ``tta`` parts."""
    lines = [_measured(report["meta"]), ""]
    rows = report.get("realistic", [])
    if rows:
        lines += [
            "**Throughput** (completion tokens per second over whole steps; median, range of the per-process "
            "medians in brackets; the ratio of the medians, and per A/B pair the ratio of the pair's two process "
            "medians with their median and range):",
            "",
            "| workload | P x G x new tokens | lit-grpo tokens/s | TRL tokens/s | ratio | ratio per A/B pair | "
            "lit-grpo s/step | TRL s/step | " + PAIRED_HEADER + " |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['workload']}: {r['model']} ({r['lit']['params'] / 1e6:.1f}M{_adapters(r)}) | {r['prompts']} x "
                f"{r['group']} x {r['new_tokens']} | {_throughput_cells(r)} | {_paired_cells(r)} |"
            )
        lines += ["", PAIRED_NOTE]
        agree = {True: "yes", False: "**no**", None: "not recorded"}
        lines += [
            "",
            "The same prompts at every step in every process of both sides (each step's generation from the same "
            "torch seed): " + ", ".join(f"{r['workload']} {agree[r.get('same_prompts')]}" for r in rows) + ".",
        ]
        lines += [
            "",
            "**Phases** (median seconds per step; peak RSS of the process):",
            "",
            "| workload | trainer | generate | score | forward | backward | optimizer | step | peak RSS MiB | "
            "timed steps |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r, name, x in _sides(rows):
            lines.append(
                f"| {r['workload']} | {name} | " + " | ".join(f"{x[p]:.3f}" for p in [*PHASES, "step_s"])
                + f" | {x['peak_rss_mib']:.0f} | {x['steps_timed']} in {x['processes']} processes |"
            )
        lines += [
            "",
            "**Work done against work needed** (per timed step, mean: rows trained and their tokens; useful = the "
            "rows of groups whose rewards differ, the only rows with a non-zero advantage, with each prompt "
            "once; training GFLOP = 3 forwards over those tokens" + (
                ", with adapters 2 forwards through the frozen weights and LM head and 3 through attention and the "
                "adapters" if any(r.get("lora") for r in rows) else "") + "):",
            "",
            "| workload | trainer | groups of equal rewards | rows trained | prompt + completion tokens trained | "
            "useful tokens | training GFLOP executed | useful | executed / useful |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r, name, x in _sides(rows):
            n, su = x["steps_timed"], x["sums"]
            lines.append(
                f"| {r['workload']} | {name} | {x['zero_variance_share']:.2f} | "
                f"{su['trained_rows'] / n:.1f} of {r['prompts'] * r['group']} | "
                f"{su['trained_prompt_tokens'] / n:.0f} + {su['trained_tokens'] / n:.0f} | "
                f"{su['useful_prompt_tokens'] / n:.0f} + {su['useful_tokens'] / n:.0f} | "
                f"{x['executed_gflop']:.2f} | {x['useful_gflop']:.2f} | "
                f"{x['executed_gflop'] / max(x['useful_gflop'], 1e-12):.2f} |"
            )
        lines += _roofline_table(rows, report.get("realistic_peak"))
        lines += _targets_table(rows)
    for tta in report.get("tta") or []:
        lines += _tta_table(tta)
    return "\n".join(lines) + "\n"
