"""Draw estimator weight curves omega(p) before spending compute.

    python -m lit_grpo.diagnostics.weight_curve_cli --estimators GRPO Sign MaxRL SoftmaxGRPO \\
        --group-size 4 --out curves.png

An estimator is a name from ``lit_grpo.estimators`` or a dotted class path, optionally with
constructor arguments after a colon: ``GRPO:std=population``, ``SoftmaxGRPO:tau=0.5``,
``my_pkg.MyEstimator:alpha=2``. The curves are exact (enumeration over ``K ~ Bin(G, p)``, see
:func:`lit_grpo.diagnostics.weight_curve.weight_curve`). A table of omega at a few pass rates is
printed; ``--out`` writes a PNG and ``--logdir`` a TensorBoard figure (both need matplotlib).
"""

from __future__ import annotations

import argparse
import ast
import importlib
from collections.abc import Sequence

import torch

from lit_grpo.diagnostics.plots import weight_curve_figure
from lit_grpo.diagnostics.weight_curve import Estimator, weight_curve

#: Pass rates of the printed table.
TABLE_PS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word such as population


def parse_estimator(spec: str) -> Estimator:
    """``Name`` or ``pkg.mod.Class``, optionally ``:key=value,key=value`` -> an estimator instance."""
    path, _, arg_text = spec.partition(":")
    if "." in path:
        module_name, _, cls_name = path.rpartition(".")
    else:
        module_name, cls_name = "lit_grpo.estimators", path
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"--estimators: unknown estimator {path!r}; use a name from lit_grpo.estimators "
            "(GRPO, DrGRPO, RLOO, Sign, SignBalance, SoftmaxGRPO, MaxRL, PassAtK; ReinforcePlusPlus and GPG "
            "have no per-group curve) or a dotted class path"
        ) from err
    kwargs = {}
    for item in filter(None, arg_text.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(
                f"--estimators: bad argument {item!r} in {spec!r}; write key=value, e.g. GRPO:std=population"
            )
        kwargs[key.strip()] = _value(value.strip())
    return cls(**kwargs)


def curves(specs: Sequence[str], G: int, ps: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{spec: omega(ps) [M]}`` for each estimator spec at group size ``G``."""
    out = {}
    for spec in specs:
        estimator = parse_estimator(spec)
        if getattr(estimator, "couples_groups", False):
            weight_curve(estimator, G, ps)  # raises: no per-group curve, whatever the group size
        try:
            out[spec] = weight_curve(estimator, G, ps)
        except ValueError as err:
            raise ValueError(
                f"--estimators {spec} at --group-size {G}: {err}; choose a larger --group-size"
            ) from err
    return out


def format_table(values: dict[str, torch.Tensor], ps: Sequence[float]) -> str:
    """A markdown table of omega(p): one row per estimator, one column per pass rate."""
    width = max(len(name) for name in values)
    head = f"| {'estimator':<{width}} | " + " | ".join(f"p={p:<5g}" for p in ps) + " |"
    rule = "|" + "-" * (width + 2) + "|" + "|".join("-" * 9 for _ in ps) + "|"
    rows = [
        f"| {name:<{width}} | " + " | ".join(f"{v:7.4f}" for v in omega.tolist()) + " |"
        for name, omega in values.items()
    ]
    return "\n".join([head, rule, *rows])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=["GRPO", "DrGRPO", "Sign", "MaxRL", "SoftmaxGRPO"],
        help="estimator names or class paths, with optional ':key=value,...' arguments",
    )
    parser.add_argument("--group-size", "-G", type=int, default=8, help="group size G (default 8)")
    parser.add_argument("--points", type=int, default=199, help="pass rates drawn in (0, 1) (default 199)")
    parser.add_argument("--out", default=None, help="write the figure to this PNG file")
    parser.add_argument(
        "--logdir", default=None, help="write the figure as a TensorBoard event in this directory"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.group_size < 1:
        raise SystemExit(f"--group-size must be >= 1, got {args.group_size}")
    if args.points < 2:
        raise SystemExit(f"--points must be >= 2, got {args.points}")
    try:
        print(f"omega(p) at G = {args.group_size}\n")
        print(format_table(curves(args.estimators, args.group_size, torch.tensor(TABLE_PS)), TABLE_PS))
        if args.out is None and args.logdir is None:
            return 0
        ps = torch.linspace(0, 1, args.points + 2, dtype=torch.float64)[1:-1]  # strictly inside (0, 1)
        values = curves(args.estimators, args.group_size, ps)
    except ValueError as err:
        raise SystemExit(str(err)) from err
    fig = weight_curve_figure(ps.tolist(), {k: v.tolist() for k, v in values.items()}, args.group_size)
    if fig is None:
        raise SystemExit("no figure written: matplotlib is not installed (pip install matplotlib)")
    if args.out is not None:
        fig.savefig(args.out, dpi=150)
        print(f"\nwrote {args.out}")
    if args.logdir is not None:
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(args.logdir) as writer:
            writer.add_figure("estimator/weight_curve", fig, global_step=0)
        print(f"wrote a TensorBoard figure to {args.logdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
