"""Gradient fidelity on a policy: draw the reference pools, measure every estimator, build the tables (as rows
and as CSV text) and the figure; the callers write them (``lit-grpo fidelity`` and
:class:`lit_grpo.callbacks.GradientFidelity`). The maths is :mod:`lit_grpo.diagnostics.fidelity`."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from lit_grpo.diagnostics.fidelity import (
    OBJECTIVES,
    Estimator,
    PromptFidelity,
    pool_weight,
    prompt_fidelity,
)
from lit_grpo.diagnostics.gradients import LinearTarget, gradient_row_blocks
from lit_grpo.diagnostics.weight_curve import weight_curve
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams

Score = Callable[[PromptBatch, Rollouts], tuple[torch.Tensor, object]]


def pool(
    policy: nn.Module,
    generate: Callable[[list[str], int, SamplingParams], Rollouts],
    score: Score,
    batch: PromptBatch,
    size: int,
    sampling: SamplingParams,
    targets: Sequence[LinearTarget],
    projection_dim: int | None = None,
    seed: int = 0,
    micro_batch_size: int | None = None,
):
    """Yields ``(rows [M, D] float32, rewards [M] float64, unscorable)`` for each prompt of ``batch``.

    ``M = size`` completions are drawn for the prompt; unscorable (NaN) rewards count as wrong.
    """
    for i in range(len(batch)):
        one = batch.select([i])
        with torch.no_grad():
            rollouts = generate(one.prompts, size, sampling)
        rewards = score(one, rollouts)[0][0].double()  # [M]
        unscorable = int(rewards.isnan().sum())
        ones = torch.ones(len(rollouts))
        blocks = gradient_row_blocks(
            policy, rollouts, ones, targets, sampling.temperature, projection_dim, seed, micro_batch_size
        )
        rows = torch.cat([b.cpu() for _, b in blocks])  # [M, D]
        yield rows, rewards.nan_to_num(0.0).cpu(), unscorable


def measure(
    pools,
    estimators: dict[str, Estimator],
    G: int,
    S: int,
    k: int,
    T: int,
    seed: int = 0,
    report: Callable[[int, PromptFidelity, torch.Tensor], None] | None = None,
) -> list[PromptFidelity]:
    """:func:`~lit_grpo.diagnostics.fidelity.prompt_fidelity` of each pool, subsamples drawn from ``seed``.

    ``pools`` may be the :func:`pool` generator: each pool's rows are dropped once summarised, so memory
    holds one prompt's ``[M, D]`` rows (and every prompt's few ``[D]`` vectors), not all of them.
    ``report(i, result, rows)`` is called after each prompt.
    """
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, (rows, r, _) in enumerate(pools):
        out.append(prompt_fidelity(rows, r, estimators, G, S, OBJECTIVES, k, T, gen))
        if report is not None:
            report(i, out[-1], rows)
    return out


def prompt_table(
    prompts: Sequence[PromptFidelity], ids: Sequence[str], estimators: dict[str, Estimator], G: int, M: int
) -> list[dict]:
    """One row per prompt and estimator: pass rate, measured omega (and its standard error), the exact
    expectation for the pool, the predicted omega(p), the variance of one group's estimate."""
    out = []
    for pid, p in zip(ids, prompts, strict=True):
        inside = 0 < p.num_correct < M
        for label, estimator in estimators.items():
            out.append(
                {
                    "prompt": pid,
                    "pass_rate": p.pass_rate,
                    "correct": p.num_correct,
                    "estimator": label,
                    "omega": p.omegas[label],
                    "omega_se": p.omega_ses[label],
                    "omega_pool": pool_weight(estimator, G, M, p.num_correct),
                    "omega_predicted": weight_curve(estimator, G, [p.pass_rate]).item()
                    if inside
                    else math.nan,
                    "variance": p.variances[label],
                }
            )
    return out


def csv_text(rows: list[dict]) -> str:
    """``rows`` (dicts with the same keys) as CSV text: a header line, floats to 6 significant digits."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return text.getvalue()


def figure(prompt_rows: list[dict], bins: list[dict], estimators: dict[str, Estimator], G: int, title: str):
    """The measured-against-predicted omega figure (see
    :func:`~lit_grpo.diagnostics.plots.fidelity_figure`)."""
    from lit_grpo.diagnostics.plots import fidelity_figure

    ps = torch.linspace(0, 1, 101, dtype=torch.float64)[1:-1]
    curves = {label: weight_curve(e, G, ps).tolist() for label, e in estimators.items()}
    points = {
        label: [(r["pass_rate"], r["omega"], r["omega_se"]) for r in prompt_rows if r["estimator"] == label]
        for label in estimators
    }
    snr = {
        label: {r["bin"]: r["snr"] for r in bins if r["estimator"] == label and r["objective"] == "reward"}
        for label in estimators
    }
    return fidelity_figure(ps.tolist(), curves, points, snr, title)
