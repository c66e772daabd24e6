"""The report of ``bench/grpo_step.py``: FLOP counts, the markdown tables and writing them into a doc."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from grpo_step_common import PHASES

LARGE_VOCAB = 151_936  # Qwen2/2.5's vocabulary size


# ---- FLOPs --------------------------------------------------------------------------------------------------
def forward_flops(model_dir: str, prompt_tokens: float, completion_tokens: float, sequences: int) -> float:
    """Model FLOPs of one forward over a step's real tokens (``2 * matmul weights`` per token through the
    blocks, ``2 * V * H`` per completion token through the LM head, ``4 * L * H * context`` per token for
    attention scores and values, context = the causal average over a mean-length sequence)."""
    c = json.loads((Path(model_dir) / "config.json").read_text())
    h, layers, ffn, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    block = layers * (2 * h * h + 2 * h * kv + 3 * h * ffn)
    tokens = prompt_tokens + completion_tokens
    length = tokens / max(sequences, 1)
    attention = 4 * layers * h * tokens * (length + 1) / 2
    return 2 * block * tokens + 2 * vocab * h * completion_tokens + attention


def flop_rates(model_dir: str, row: dict, sequences: int) -> dict[str, float]:
    """Training FLOP/s (forward + backward = 3 forwards, over their time) and whole-step FLOP/s (those plus
    generation, counted as one more forward, over the step's wall time)."""
    fwd = forward_flops(model_dir, row["prompt_tokens"], row["tokens"], sequences)
    train_s = row["forward_s"] + row["backward_s"]
    return {
        "train_gflop": 3 * fwd / 1e9,
        "train_gflops": 3 * fwd / train_s / 1e9,
        "step_gflops": 4 * fwd / row["step_s"] / 1e9,
    }


def work_flops(model_dir: str, sums: dict[str, float], steps: int) -> dict[str, float]:
    """Training GFLOP per step (forward + backward = 3 forwards) over the tokens a trainer ran (``executed``)
    and over the useful ones (rows of groups whose rewards differ, each prompt once), from the summed counts
    of ``steps`` steps."""
    def gflop(prefix: str, rows: str) -> float:
        fwd = forward_flops(model_dir, sums[f"{prefix}_prompt_tokens"], sums[f"{prefix}_tokens"], sums[rows])
        return 3 * fwd / max(steps, 1) / 1e9

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
            f"(1 min) {m['load_before']} before and {m['load_after']} after; {m['elapsed_min']:.1f} min in all.")


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
            "ratio per A/B pair | lit-grpo s/step | TRL s/step |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["compare"]:
            lines.append(
                f"| {r['size']} ({r['lit']['params'] / 1e6:.1f}M) | {r['precision']} | "
                f"{r['prompts']} x {r['group']} x {r['new_tokens']} | {_throughput_cells(r)} |"
            )
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
                "**FLOP/s against the matmul peak** (training = forward + backward FLOPs over their time; "
                "step = training plus generation over the whole step):",
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
            "fp32; peak RSS over the whole process, RSS once the model is loaded):",
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


def _throughput_cells(r: dict) -> str:
    """The cells both throughput tables share: tokens/s of each side with its range, the ratio, the ratio per A/B
    pair, seconds per step of each side."""
    lit, trl = r["lit"], r["trl"]
    pairs = ", ".join(f"{x:.2f}" for x in r["pair_ratios"])
    return (f"{lit['tokens_per_s']:.0f} [{lit['tps_min']:.0f}-{lit['tps_max']:.0f}] | {trl['tokens_per_s']:.0f} "
            f"[{trl['tps_min']:.0f}-{trl['tps_max']:.0f}] | **{r['ratio']:.2f}x** | {pairs} | {lit['step_s']:.3f} | "
            f"{trl['step_s']:.3f}")


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
            "medians in brackets):",
            "",
            "| workload | P x G x new tokens | lit-grpo tokens/s | TRL tokens/s | ratio | ratio per A/B pair | "
            "lit-grpo s/step | TRL s/step |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['workload']}: {r['model']} ({r['lit']['params'] / 1e6:.1f}M) | {r['prompts']} x {r['group']} x "
                f"{r['new_tokens']} | {_throughput_cells(r)} |"
            )
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
            "once; training GFLOP = 3 forwards over those tokens):",
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
    tta = report.get("tta")
    if tta:
        seeds = [r["seed"] for r in tta["runs"]["lit-grpo"]]
        lines += [
            "",
            f"**Time to accuracy** (quickstart workload: training seconds, evaluations excluded, until held-out "
            f"greedy accuracy on the 200 validation prompts first reaches {tta['target']:.2f}; evaluated every "
            f"{tta['eval_every']} steps, at most {tta['max_steps']} steps; the step count in brackets):",
            "",
            "| trainer | " + " | ".join(f"seed {s}" for s in seeds) + " | median s | median steps | s/step |",
            "|---|" + "---|" * (len(seeds) + 3),
        ]
        for runner, name in (("lit-grpo", "lit-grpo"), ("trl", "TRL")):
            cells = [f"{r['train_s']:.0f} ({r['step']})" if r["reached"] else f"not reached ({tta['max_steps']})"
                     for r in tta["runs"][runner]]
            summary = tta[runner]
            median_s = f"{summary['median_train_s']:.0f}" if summary["median_train_s"] is not None else "-"
            median_step = f"{summary['median_step']:.0f}" if summary["median_step"] is not None else "-"
            step_s = statistics.median(r["step_s"] for r in tta["runs"][runner])
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {median_s} | {median_step} | {step_s:.3f} |")
        a, b = tta["lit-grpo"]["median_train_s"], tta["trl"]["median_train_s"]
        if a and b:
            lines += ["", f"Median time to {tta['target']:.2f}: TRL / lit-grpo = **{b / a:.2f}x**."]
    return "\n".join(lines) + "\n"
