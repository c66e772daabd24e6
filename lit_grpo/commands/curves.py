"""``lit-grpo curves``: estimator weight curves omega(p), before spending compute.

    lit-grpo curves --estimators GRPO Sign MaxRL SoftmaxGRPO --group-size 4 --out curves.png

An estimator is named as LightningCLI names ``--model.estimator`` (:func:`lit_grpo.components.resolve`): a
short name of any imported :class:`~lit_grpo.estimators.AdvantageEstimator` or a dotted class path, optionally
with constructor arguments after a colon: ``GRPO:std=population``, ``SoftmaxGRPO:tau=0.5``,
``my_pkg.MyEstimator:alpha=2``. The curves are exact (enumeration over ``K ~ Bin(G, p)``,
:func:`lit_grpo.diagnostics.weight_curve.weight_curve`). A table of omega at a few pass rates is printed;
``--out`` writes a PNG and ``--logdir`` a TensorBoard figure (both need matplotlib).
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence

from lit_grpo.checks import require


def estimator_from_spec(spec: str):
    """``Name`` or ``pkg.mod.Class``, optionally ``:key=value,key=value`` -> an estimator instance; a
    ValueError that names the fix otherwise (an unknown name's lists the valid ones)."""
    from lit_grpo.components import resolve
    from lit_grpo.estimators import AdvantageEstimator

    name, _, arg_text = spec.partition(":")
    cls = resolve(AdvantageEstimator, name, "--estimators")
    kwargs = {}
    for item in filter(None, arg_text.split(",")):
        key, eq, value = item.partition("=")
        require(
            eq, f"--estimators: bad argument {item!r} in {spec!r}; write key=value, e.g. GRPO:std=population"
        )
        try:
            kwargs[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            kwargs[key.strip()] = value.strip()  # a bare word such as population
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ValueError(f"--estimators {spec}: {err}") from None


def omega(specs: Sequence[str], G: int, ps):
    """``{spec: omega(ps) [M]}`` for each estimator spec at group size ``G``."""
    from lit_grpo.diagnostics.weight_curve import weight_curve

    out = {}
    for spec in specs:
        estimator = estimator_from_spec(spec)
        try:
            out[spec] = weight_curve(estimator, G, ps)
        except ValueError as err:
            fix = "drop it from --estimators" if estimator.couples_groups else "choose a larger --group-size"
            raise ValueError(f"--estimators {spec} at --group-size {G}: {err}; {fix}") from err
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lit-grpo curves", description="Draw estimator weight curves omega(p) before spending compute."
    )
    parser.add_argument("--estimators", nargs="+", default=["GRPO", "DrGRPO", "Sign", "MaxRL", "SoftmaxGRPO"],
                        help="estimator names or class paths, with optional ':key=value,...' arguments")
    parser.add_argument("--group-size", "-G", type=int, default=8, help="group size G (default 8)")
    parser.add_argument("--points", type=int, default=199, help="pass rates drawn in (0, 1) (default 199)")
    parser.add_argument("--out", default=None, help="write the figure to this PNG file")
    parser.add_argument(
        "--logdir", default=None, help="write the figure as a TensorBoard event in this directory"
    )
    return parser


def curves(argv: list[str]) -> int:
    """estimator weight curves omega(p), no run needed: lit-grpo curves --estimators GRPO Sign --out
    curves.png"""
    import torch

    from lit_grpo.diagnostics.plots import weight_curve_figure
    from lit_grpo.diagnostics.weight_curve import TABLE_PS, format_table

    args = build_parser().parse_args(argv)
    if args.group_size < 1:
        raise SystemExit(f"--group-size must be >= 1, got {args.group_size}")
    if args.points < 2:
        raise SystemExit(f"--points must be >= 2, got {args.points}")
    try:
        print(f"omega(p) at G = {args.group_size}\n")
        print(format_table(omega(args.estimators, args.group_size, torch.tensor(TABLE_PS)), TABLE_PS))
        if args.out is None and args.logdir is None:
            return 0
        ps = torch.linspace(0, 1, args.points + 2, dtype=torch.float64)[1:-1]  # strictly inside (0, 1)
        values = omega(args.estimators, args.group_size, ps)
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
