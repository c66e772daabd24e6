"""The report of the benchmark: FLOP counts, paired estimates, the markdown tables and writing them into a
doc."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from lit_grpo.checks import require
from lit_grpo.lab.stats import t_quantile

from .common import PHASES
from .machine import describe

LARGE_VOCAB = 151_936  # Qwen2/2.5's vocabulary size


# ---- FLOPs -------------------------------------------------------------------------------------------------
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
    """Model FLOPs of one forward over a step's real tokens, by part: ``weights``, ``2 * matmul weights``
    per token through the blocks (q, k, v, o and the gated MLP: ``L (2 H Hq + 2 H Hkv + 3 H F)``, ``Hq`` =
    heads x head dim, ``Hkv`` = key-value heads x head dim); ``head``, ``2 * V * H`` per completion token
    through the LM head (one logits row per completion token); ``attention``, ``4 * L * Hq`` per attended
    key for attention scores and values; ``adapters``, with ``lora`` (``{"r": ..., "target_modules":
    [...]}``), ``2 r (in + out)`` per token through each adapted projection of every layer, else 0.
    ``context``: the keys attended over all those tokens (``*_context`` of ``group_counts``); without it,
    the causal average over ``sequences`` mean-length sequences."""
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
    """Model FLOPs of one forward over a step's real tokens: the sum of :func:`forward_parts` (no
    adapters)."""
    return sum(forward_parts(model, prompt_tokens, completion_tokens, sequences, context).values())


def training_flops(model: str | dict, prompt_tokens: float, completion_tokens: float, sequences: int,
                   context: float | None = None, lora: dict | None = None) -> float:
    """FLOPs of a forward and backward over the tokens. Every weight trained: 3 forwards (the backward
    computes the gradients of the activations and of the weights). With ``lora`` the frozen weights and LM
    head need only the activations' gradients, 2 forwards of them (within the first layer's input
    gradients, which nothing needs); attention and the adapters 3 forwards."""
    f = forward_parts(model, prompt_tokens, completion_tokens, sequences, context, lora)
    frozen = 2 if lora else 3
    return frozen * (f["weights"] + f["head"]) + 3 * (f["attention"] + f["adapters"])


def useful_flops(model: str | dict, sums: dict[str, float], steps: int, lora: dict | None = None,
                 ) -> dict[str, float] | None:
    """Useful GFLOP per step of each phase, from the counts of ``steps`` steps summed (``None`` for a run
    that did not count the attention context). ``generation``: one forward over every group's prompt once
    (its prefill) and every sampled token (its decode; one position a row more than strictly needed, as the
    last sampled token is never fed back), the LM head on every sampled token, adapters folded into the
    weights (none counted); ``training``: :func:`training_flops` over the useful rows (groups whose rewards
    differ) with each prompt once; ``step``: both."""
    if "sampled_context" not in sums:
        return None
    gen, train = _generation_flops(model, sums), _counted_training_flops(model, sums, "useful", lora)
    per_step = 1e9 * max(steps, 1)
    return {"generation": gen / per_step, "training": train / per_step, "step": (gen + train) / per_step}


def _generation_flops(model: str | dict, counts: dict[str, float]) -> float:
    """One forward over each group's prompt once and every sampled token (``sampled_*`` of
    ``group_counts``)."""
    return forward_flops(model, counts["sampled_prompt_tokens"], counts["sampled_tokens"], 0,
                         counts["sampled_context"])


def _counted_training_flops(model: str | dict, counts: dict[str, float], prefix: str,
                            lora: dict | None = None) -> float:
    """:func:`training_flops` over the rows ``group_counts`` counted as ``prefix`` (``useful`` or
    ``trained``): their prompt and completion tokens and attention context."""
    return training_flops(model, counts[f"{prefix}_prompt_tokens"], counts[f"{prefix}_tokens"],
                          counts[f"{prefix}_rows"], counts.get(f"{prefix}_context"), lora)


def roofline(gflop: dict[str, float], seconds: dict[str, float], peak_gflops: float | None,
             ) -> dict[str, dict]:
    """Per phase: useful GFLOP per step, GFLOP/s over the phase's time per step (``generation``:
    ``generate_s``, ``training``: ``forward_s + backward_s``, ``step``: ``step_s``) and the fraction of the
    matmul peak (``None`` without a peak)."""
    times = {"generation": seconds["generate_s"], "training": seconds["forward_s"] + seconds["backward_s"],
             "step": seconds["step_s"]}
    out = {}
    for phase, flop in gflop.items():
        rate = flop / times[phase] if times[phase] > 0 else 0.0
        out[phase] = {"gflop": flop, "gflops": rate, "peak_frac": rate / peak_gflops if peak_gflops else None}
    return out


FLOP_LABELS = {
    "every row": "**FLOP/s against the matmul peak** (training = forward + backward FLOPs over their time; "
                 "step = training plus generation over the whole step; every row counted with its prompt):",
    "executed": "**FLOP/s against the matmul peak** (training: the forward + backward FLOPs each trainer "
                "ran, over their time, each prompt counted as often as the trainer encoded it; step: those "
                "plus generation's useful FLOPs, each prompt once and every sampled token, over the whole "
                "step):",
}


def flop_rates(model_dir: str | dict, row: dict, sequences: int) -> dict[str, float]:
    """Training FLOP/s and whole-step FLOP/s of a run's row (per-step counts). Training: the FLOPs the
    trainer ran forward and backward (:func:`training_flops` over the rows it trained, each prompt as often
    as it encoded it: once a group with lit-grpo's shared prefix, once a row in TRL), over their time.
    Step: those plus generation's useful FLOPs (one forward over each group's prompt once and every sampled
    token, as :func:`useful_flops` counts it, the same for both trainers) over the step's wall time. A row
    without those counts (a run before they were recorded): one forward over every row's prompt and
    completion, 3 for training and 1 more for generation."""
    executed = "trained_prompt_tokens" in row and "sampled_context" in row
    if executed:
        train, gen = _counted_training_flops(model_dir, row, "trained"), _generation_flops(model_dir, row)
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


def work_flops(model_dir: str, sums: dict[str, float], steps: int, lora: dict | None = None,
               ) -> dict[str, float]:
    """Training GFLOP per step (:func:`training_flops`) over the tokens a trainer ran (``executed``) and
    over the useful ones (rows of groups whose rewards differ, each prompt once), from the summed counts of
    ``steps`` steps (with the exact attention context where the run counted it)."""
    def gflop(prefix: str) -> float:
        return _counted_training_flops(model_dir, sums, prefix, lora) / max(steps, 1) / 1e9

    return {
        "executed_gflop": gflop("trained"),
        "useful_gflop": gflop("useful"),
        "zero_variance_share": 1 - sums["mixed_groups"] / max(sums["groups"], 1),
    }


# ---- the report --------------------------------------------------------------------------------------------
def _measured(m: dict) -> str:
    """The line that says when, how and on what a report was measured."""
    return (f"Measured {m['date']} with `{m['command']}` on {m['cpu']}, {m['threads']} threads; torch "
            f"{m['torch']}, transformers {m['transformers']}, TRL {m.get('trl', 'not run')}. Load average "
            f"(1 min) {m['load_before']} before and {m['load_after']} after; {m['elapsed_min']:.1f} min in "
            "all.\n\n"
            f"Machine at the start: {describe(m.get('machine_start'))}; at the end: "
            f"{describe(m.get('machine_end'))}. Busy by the rule of `bench/grpo_step/machine.py` (before the "
            "run or during a measuring process): "
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
            "Matmul peak (best of `torch.matmul` and `F.linear` on square n = 256..2048): "
            f"**fp32 {peak['fp32']:.1f} GFLOP/s**, **bf16 {peak['bf16']:.1f} GFLOP/s**.",
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
                f"{r['prompts']} x {r['group']} x {r['new_tokens']} | {_throughput_cells(r)} | "
                f"{_paired_cells(r)} |"
            )
        lines += ["", PAIRED_NOTE + STEP_NOTE[all(r.get("pair_step_ratios") for r in report["compare"])]]
        lines += ["", "**Phases** (median seconds per step; train = forward + backward; peak RSS of the "
                  "process):"]
        lines += _phases_table(["model", "precision"], [([r["size"], r["precision"]], name, x)
                                                        for r, name, x in _sides(report["compare"])])
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
            f"{r0['params'] / 1e6:.0f}M parameters, P = {r0['prompts']} x G = {r0['group']}, "
            f"{r0['new_tokens']} new tokens, fp32; peak RSS over the whole process, RSS once the model is "
            f"loaded; s/step: the median of {r0.get('steps', 1)} timed step(s) after {r0.get('warmup', 0)} "
            "warm-up step(s), where the chunked head recomputes each chunk's logits in the backward pass, "
            "one more LM-head matmul than the whole-logits path):",
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
    adapters = ""
    if any(r.get("lora") for r in rows):
        adapters = " (with adapters 2 through the frozen weights and LM head)"
    lines = [
        "",
        "**Roofline** (useful FLOPs per step and their rate over each phase's time, against the matmul peak "
        f"measured in the same run: {top}; generation = a forward over every prompt once and every sampled "
        "token; training = 3 forwards over the useful rows, each prompt once" + adapters
        + "; step = both over the whole step):",
        "",
        "| workload | trainer | generation GFLOP | GFLOP/s | % of peak | training GFLOP | GFLOP/s "
        "| % of peak | step GFLOP | GFLOP/s | % of peak |",
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
    ("lora", "step time, TRL + peft / lit-grpo", "step_ratio", 4.0),
)


def _targets_table(rows: list[dict]) -> list[str]:
    """Each target of :data:`TARGETS` whose workload the run measured, its measured figure and whether it is
    met."""
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
                     f"by step time {_by_step(r)}")
            wanted, met = f">= {target:.0f}x", min(ratios) >= target
        elif key == "step_ratio":  # every pair's ratio where the run recorded them, else the medians' ratio
            ratios = _step_ratios(r)
            shown = _by_step(r) + (f" (A/B pairs {min(ratios):.2f}-{max(ratios):.2f})"
                                   if r.get("pair_step_ratios") else " (the medians' ratio)")
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
    """One workload's time to accuracy: per seed and trainer the training seconds (and steps) until the
    target, and per seed the paired ratio TRL / lit-grpo with its geometric mean and 95% interval."""
    kind = "greedy accuracy"
    if tta["samples"]:
        kind = f"sampled accuracy ({tta['samples']} completions a prompt)"
    goal = f"{tta['gain']:+.2f} over the starting policy's" if "gain" in tta else f"{tta['target']:.2f}"
    seeds = [r["seed"] for r in tta["runs"]["lit-grpo"]]
    lines = ["", f"**Time to accuracy, {tta['workload']}** (training seconds, evaluations and set-up "
             f"excluded, until held-out {kind} on the validation prompts first reaches {goal}; evaluated "
             f"every {tta['eval_every']} steps, at most {tta['max_steps']} steps; the step count in "
             "brackets):", "",
             "| trainer | " + " | ".join(f"seed {s}" for s in seeds) + " | s/step (median) |",
             "|---|" + "---|" * (len(seeds) + 1)]
    for runner, name in (("lit-grpo", "lit-grpo"), ("trl", "TRL")):
        rs = tta["runs"][runner]
        cells = [f"{r['train_s']:.0f} ({r['step']})" if r["reached"] else f"not reached ({tta['max_steps']})"
                 for r in rs]
        median = statistics.median(r["step_s"] for r in rs)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {median:.3f} |")
    if "gain" in tta:
        starts = [f"{r['evals'][0]['accuracy']:.3f}" for r in tta["runs"]["lit-grpo"]]
        lines.append("| start (lit-grpo's evaluation at step 0) | " + " | ".join(starts) + " | |")
    p = tta["paired"]
    ratios = ", ".join(f"seed {s}: {r:.2f}" for s, r in p["ratios"].items()) or "none"
    line = (f"Paired by seed, TRL's time / lit-grpo's (seeds where both reached the target: "
            f"{len(p['ratios'])} of {p['seeds']}; reached: lit-grpo {p['reached']['lit-grpo']}, TRL "
            f"{p['reached']['trl']}): {ratios}")
    if p["geomean"] is not None:
        line += f"; geometric mean **{p['geomean']:.2f}x**"
        ci = p["ci95"]
        line += f", 95% t interval [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (one pair: no interval)"
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
    """The cells both throughput tables share: tokens/s of each side with its range, the ratio, the ratio
    per A/B pair, seconds per step of each side."""
    lit, trl = r["lit"], r["trl"]
    ratios = r["pair_ratios"]
    pairs = ", ".join(f"{x:.2f}" for x in ratios)
    if len(ratios) > 1:
        pairs += f" (median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f})"
    return (f"{lit['tokens_per_s']:.0f} [{lit['tps_min']:.0f}-{lit['tps_max']:.0f}] | "
            f"{trl['tokens_per_s']:.0f} [{trl['tps_min']:.0f}-{trl['tps_max']:.0f}] | "
            f"**{r['ratio']:.2f}x** | {pairs} | {lit['step_s']:.3f} | "
            f"{trl['step_s']:.3f}")


def paired_ratio(ratios: list[float]) -> tuple[float, tuple[float, float] | None]:
    """The paired estimate of a ratio: the geometric mean of the pairs' ratios (A/B pairs of processes, or
    seeds) and its 95% interval, t on the log ratios with n - 1 degrees of freedom (None with one pair)."""
    require(len(ratios) > 0 and all(r > 0 for r in ratios),
            f"paired_ratio needs positive ratios, got {ratios}: pass each pair's ratio of two positive times")
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None
    half = t_quantile(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


def _estimate(ratios: list[float]) -> str:
    """``6.41x [5.83, 7.04]``: a paired estimate as the tables print it."""
    gm, ci = paired_ratio(ratios)
    return f"{gm:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (one pair)")


def _paired(r: dict) -> str:
    """The paired estimate of a row's tokens/s ratio."""
    return _estimate(r["pair_ratios"])


PAIRED_HEADER = ("paired ratio: geometric mean [95% t] | completion tokens a step, lit-grpo / TRL | ratio by "
                 "step time, TRL / lit-grpo")
PAIRED_NOTE = ("The paired ratio is the geometric mean of the A/B pairs' tokens/s ratios with its 95% t "
               "interval over the pairs. Each side's samples are its own, so where their completions differ "
               "in length the tokens/s ratio and the ratio of the step times differ too: a longer completion "
               "spreads a step's fixed costs over more tokens. Both are shown; neither alone is the speed of "
               "the code.")
STEP_NOTE = {True: " The ratio by step time is paired the same way (per A/B pair, TRL's median step time "
                   "over lit-grpo's).",
             False: " The ratio by step time is the ratio of the two sides' median step times (this run did "
                    "not record it per pair)."}


def _paired_cells(r: dict) -> str:
    """The cells of :data:`PAIRED_HEADER`."""
    return f"{_paired(r)} | {r['lit']['tokens']:.0f} / {r['trl']['tokens']:.0f} | {_by_step(r)}"


def _step_ratios(r: dict) -> list[float]:
    """TRL's step time over lit-grpo's per A/B pair (TRL's process median over lit-grpo's) where the run
    recorded them (``pair_step_ratios``), else the one ratio of the two sides' medians."""
    return r.get("pair_step_ratios") or [r["trl"]["step_s"] / r["lit"]["step_s"]]


def _by_step(r: dict) -> str:
    """TRL's step time over lit-grpo's, which differs from the tokens/s ratio where the two sides'
    completions differ in length: paired (:func:`paired_ratio`) over :func:`_step_ratios` where the run
    recorded the pairs', else the ratio of the two sides' medians."""
    if r.get("pair_step_ratios"):
        return _estimate(r["pair_step_ratios"])
    return f"{_step_ratios(r)[0]:.2f}x"


def _phases_table(keys: list[str], rows: list[tuple[list[str], str, dict]]) -> list[str]:
    """The phases table: per row (its key cells, the trainer, its numbers) the median seconds of each phase
    and the step, the peak RSS and how many steps were timed."""
    lines = ["", "| " + " | ".join(keys) + " | trainer | generate | score | forward | backward | optimizer | "
             "step | peak RSS MiB | timed steps |", "|---" * (len(keys) + 9) + "|"]
    for cells, name, x in rows:
        lines.append("| " + " | ".join([*cells, name, *(f"{x[p]:.3f}" for p in [*PHASES, "step_s"])])
                     + f" | {x['peak_rss_mib']:.0f} | {x['steps_timed']} in {x['processes']} processes |")
    return lines


def _settings_table(rows: list[dict]) -> list[str]:
    """What each headline row ran with: the CPU's flags, the dtype each side chose, lit-grpo's engine (at its
    defaults: what they were) and the TRL settings beyond the workload's; ``not recorded`` for older runs."""
    def flags(r: dict) -> str:
        have = r.get("cpu_flags")
        return ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in have.items()) if have else "not recorded"

    def dtype(x: dict) -> str:
        if x.get("dtype") is None:
            return "not recorded"
        return x["dtype"] + (f" ({x['autocast']} autocast)" if x.get("autocast") else "")

    def options(x: dict | None) -> str:
        return ", ".join(f"{k} {v}" for k, v in x.items()) if x else "not recorded"

    if not any(r.get("cpu_flags") or r["lit"].get("dtype") or r["lit"].get("engine") for r in rows):
        return ["", "Settings (the CPU's flags, each side's dtype, lit-grpo's engine, TRL's settings): not "
                "recorded by this run."]
    lines = ["", "**Settings** (the CPU's flags from /proc/cpuinfo; each side's weights and autocast; "
             "lit-grpo's engine at its defaults, as the run found them; TRL's settings beyond the "
             "workload's):",
             "", "| workload | CPU flags | lit-grpo dtype | TRL dtype | lit-grpo engine | TRL |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {flags(r)} | {dtype(r['lit'])} | {dtype(r['trl'])} | "
                     f"{options(r['lit'].get('engine'))} | {options(r['trl'].get('trl_settings'))} |")
    return lines


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
            "medians in brackets; the ratio of the medians, and per A/B pair the ratio of the pair's two "
            "process medians with their median and range):",
            "",
            "| workload | P x G x new tokens | lit-grpo tokens/s | TRL tokens/s | ratio | ratio per A/B pair "
            "| lit-grpo s/step | TRL s/step | " + PAIRED_HEADER + " |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['workload']}: {r['model']} ({r['lit']['params'] / 1e6:.1f}M{_adapters(r)}) | "
                f"{r['prompts']} x {r['group']} x {r['new_tokens']} | {_throughput_cells(r)} | "
                f"{_paired_cells(r)} |"
            )
        lines += ["", PAIRED_NOTE + STEP_NOTE[all(r.get("pair_step_ratios") for r in rows)]]
        lines += _settings_table(rows)
        agree = {True: "yes", False: "**no**", None: "not recorded"}
        lines += [
            "",
            "The same prompts at every step in every process of both sides (each step's generation from the "
            "same torch seed): " + ", ".join(f"{r['workload']} {agree[r.get('same_prompts')]}" for r in rows)
            + ".",
        ]
        lines += ["", "**Phases** (median seconds per step; peak RSS of the process):"]
        lines += _phases_table(["workload"], [([r["workload"]], name, x) for r, name, x in _sides(rows)])
        adapters = ""
        if any(r.get("lora") for r in rows):
            adapters = (", with adapters 2 forwards through the frozen weights and LM head and 3 through "
                        "attention and the adapters")
        lines += [
            "",
            "**Work done against work needed** (per timed step, mean: rows trained and their tokens; "
            "useful = the rows of groups whose rewards differ, the only rows with a non-zero advantage, with "
            "each prompt once; training GFLOP = 3 forwards over those tokens" + adapters + "):",
            "",
            "| workload | trainer | groups of equal rewards | rows trained | prompt + completion tokens "
            "trained | useful tokens | training GFLOP executed | useful | executed / useful |",
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
