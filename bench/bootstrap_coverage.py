"""Coverage of the 95% percentile-bootstrap interval of the interquartile mean at small n.

    python bench/bootstrap_coverage.py                     # n = 3, 5, 7, 10, 15, 20, 30
    python bench/bootstrap_coverage.py --reps 4000 --resamples 2000 --n 5 10
    python bench/bootstrap_coverage.py --json docs/results/bootstrap_coverage.json   # docs/methods.md's figures

Draws ``--reps`` samples of ``n`` values from a standard normal (true IQM 0), builds each one's 95%
percentile-bootstrap interval of the IQM from ``--resamples`` resamples (as
``lit_grpo.lab.stats.summarize`` does) and prints the share of intervals that contain 0, with
its Monte Carlo standard error. ``lit-grpo compare`` shows the bootstrap interval only from
``MIN_BOOTSTRAP_N`` runs per cell (``lit_grpo/lab/tables.py``) because of these numbers.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from lit_grpo.lab.stats import interquartile_mean


def coverage(n: int, reps: int, resamples: int, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(reps, n, generator=gen, dtype=torch.float64)  # [R, n]
    idx = torch.randint(n, (reps, resamples, n), generator=gen)  # [R, B, n]
    boot = interquartile_mean(torch.gather(x[:, None, :].expand(reps, resamples, n), 2, idx))  # [R, B]
    lo, hi = boot.quantile(0.025, dim=1), boot.quantile(0.975, dim=1)
    return ((lo <= 0) & (hi >= 0)).double().mean().item()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[3, 5, 7, 10, 15, 20, 30])
    p.add_argument("--reps", type=int, default=2000)
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the settings and the coverage per n to this file")
    args = p.parse_args()
    print("| n | coverage of the nominal 95% interval | Monte Carlo SE |")
    print("|---|---|---|")
    rows = []
    for n in args.n:
        c = coverage(n, args.reps, args.resamples, args.seed)
        se = math.sqrt(c * (1 - c) / args.reps)
        rows.append({"n": n, "coverage": c, "mc_se": se})
        print(f"| {n} | {c:.3f} | {se:.3f} |")
    if args.json:
        settings = {
            "reps": args.reps,
            "resamples": args.resamples,
            "seed": args.seed,
            "data": "standard normal",
        }
        args.json.write_text(json.dumps({"settings": settings, "coverage": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
