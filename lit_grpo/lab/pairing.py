"""What the runs of one seed share (common random numbers), read from the resolved configs, for the report.

Two runs of one seed are paired data when they draw the same prompts and sample with the same random
numbers: the prompts of every step are the same when the data settings are, the sampling seed of every
step when ``seed_everything`` is fixed and the arms take as many optimizer steps per rollout batch, and
step 0's completions when, besides, the initial weights and the sampling settings are (docs/pairing.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from lit_grpo.lab.markdown import md_head, md_row
from lit_grpo.lab.spec import Experiment

#: The resolved settings each shared quantity depends on (names as in the report's table).
PROMPTS = ("data seed", "data source", "prompts per step", "processes")
SAMPLING_SEED = ("seed_everything", "optimizer steps per batch", "processes")
FIRST_COMPLETIONS = PROMPTS + ("seed_everything", "model", "group size", "engine", "sampling")


@dataclass(frozen=True)
class Pairing:
    """The settings of one arm x setting that decide what its runs share with another's at the same seed."""

    values: tuple[tuple[str, str], ...]  # ((name, value),) with the names above
    dynamic_sampling: bool = False  # filter_degenerate: refilled prompts depend on the arm's own history

    def get(self, name: str) -> str:
        return dict(self.values)[name]


def _axes_apart(s: str, t: str) -> int:
    """On how many sweep axes two settings' labels (``a=1,b=2``) differ."""
    return sum(x != y for x, y in zip(s.split(","), t.split(","), strict=True))


def pairing_of(cli) -> Pairing:
    """The pairing settings of a LightningCLI object built with ``run=False`` (first seed of a cell)."""
    model, data = cli.model, cli.datamodule
    seed = cli.config.get("seed_everything")
    steps = getattr(model, "num_iterations", 1) * getattr(model, "steps_per_generation", 1)
    sampling = getattr(model, "sampling", None)
    values = {
        "seed_everything": str(seed) if isinstance(seed, int) and not isinstance(seed, bool) else "random",
        "data seed": str(getattr(data, "seed", "")),
        "data source": repr(getattr(data, "source", "")),
        "prompts per step": str(getattr(data, "prompts_per_step", "")),
        "processes": str(cli.trainer.world_size),
        "optimizer steps per batch": str(steps),
        "model": str(getattr(model, "model_name", "")),
        "group size": str(getattr(model, "group_size", "")),
        "engine": type(getattr(model, "engine", None)).__name__,
        "sampling": "" if sampling is None else
        f"temperature={sampling.temperature}, top_p={sampling.top_p}, top_k={sampling.top_k}, "
        f"max_new_tokens={sampling.max_new_tokens}",
    }  # fmt: skip
    return Pairing(tuple(values.items()), bool(getattr(model, "filter_degenerate", False)))


def shared(a: Pairing, b: Pairing) -> dict[str, str]:
    """What two cells' runs of one seed share: per quantity "yes", or "no" with the settings that differ."""

    def check(names: tuple[str, ...]) -> str:
        differ = [n for n in dict.fromkeys(names) if a.get(n) != b.get(n)]
        random = "seed_everything" in names and "random" in (
            a.get("seed_everything"),
            b.get("seed_everything"),
        )
        if random:
            return "no: seed_everything is not fixed (each run draws its own)"
        return "yes" if not differ else "no: " + ", ".join(f"{n} {a.get(n)} vs {b.get(n)}" for n in differ)

    out = {"prompts of every step": check(PROMPTS), "sampling seed of every step": check(SAMPLING_SEED),
           "step 0 completions": check(FIRST_COMPLETIONS)}  # fmt: skip
    if out["sampling seed of every step"].startswith("no") and check(SAMPLING_SEED[:1]) == "yes":
        out["sampling seed of every step"] += " (only step 0's is shared)"
    if a.dynamic_sampling or b.dynamic_sampling:
        out["refilled prompts"] = "while both arms have refilled equally (filter_degenerate)"
    return out


def arm_pairs(exp: Experiment, arms: list[str]) -> list[tuple[str, str]]:
    """Every pair of arms, or each arm against ``exp.reference``."""
    if exp.reference is not None:
        return [(exp.reference, a) for a in arms if a != exp.reference]
    return list(itertools.combinations(arms, 2))


def cell_pairs(exp: Experiment, keys: list[tuple[str, str]]) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The (arm, setting) pairs the report compares: arms within a setting (each against ``reference`` when
    set) and/or settings one sweep axis apart (``G=2,P=1`` and ``G=2,P=16``) within an arm, as ``exp.tests``
    asks."""
    pairs = []
    arms = list(dict.fromkeys(a for a, _ in keys))
    settings = list(dict.fromkeys(s for _, s in keys))
    if exp.tests in ("arms", "both"):
        pairs += [
            ((a, s), (b, s))
            for s in settings
            for a, b in arm_pairs(exp, arms)
            if (a, s) in keys and (b, s) in keys
        ]
    if exp.tests in ("settings", "both"):
        for arm in arms:
            mine = [s for s in settings if (arm, s) in keys]
            pairs += [((arm, s), (arm, t)) for s, t in itertools.combinations(mine, 2)
                      if _axes_apart(s, t) == 1]
    return pairs


def pairing_section(exp: Experiment, pairings: dict[tuple[str, str], Pairing]) -> list[str]:
    """Markdown: what the runs of one seed share, per compared pair of cells."""
    if not pairings:
        return ["(not resolved: the report was rebuilt from a runs.csv without building the configs)"]
    lines = [
        "Runs of one seed are paired data when they draw the same prompts and sample with the same random "
        "numbers (common random numbers): the prompt order is fixed by the data settings, and torch, numpy "
        "and `random` are reseeded from (seed_everything, optimizer step, rank) before every step. Arms that "
        "share all three columns sample step 0 from the same weights with the same random numbers, so the "
        "same completions; later steps draw the same random numbers from policies that have moved apart, "
        "so their completions agree less as the arms diverge (docs/pairing.md). The tests below pair runs "
        "by seed whatever this table says; where it says no, the pairing is by seed label only.",
        "",
    ]
    pairs = cell_pairs(exp, list(pairings))
    refills = any(p.dynamic_sampling for p in pairings.values())
    head = ["A", "B", "prompts of every step", "sampling seed of every step", "step 0 completions"]
    head += ["refilled prompts"] if refills else []
    lines += md_head(head, rule="---")
    for a, b in pairs:
        s = shared(pairings[a], pairings[b])
        row = [f"{a[0]} @ {a[1]}", f"{b[0]} @ {b[1]}", *(s[h] for h in head[2:5])]
        row += [s.get("refilled prompts", "—")] if refills else []
        lines.append(md_row(row))
    return lines
