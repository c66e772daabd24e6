"""The test skill of a policy that always gives one answer, on the test split of experiments/sign_balance_skill.yaml.

    python scripts/constant_answer_skill.py --json docs/results/sign_balance_skill/constant_answers.json

The split is the experiment's own (its ``--data.source`` arguments, read from the experiment file); skill is the
mean per-prompt chance-corrected accuracy (acc - 1/k) / (1 - 1/k) that ``TestSplitReport`` logs as ``test/skill``,
with acc 1 where the constant answer is the prompt's residue and 0 elsewhere. Writes, per answer 0..9, that skill,
and the split's mean chance 1/k.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from jsonargparse import ArgumentParser

from lit_grpo.data import SyntheticResidue
from lit_grpo.lab.loader import load_experiment

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "sign_balance_skill.yaml"
PREFIX = "--data.source.init_args."


def test_split(experiment: Path = EXPERIMENT) -> list[dict]:
    """The experiment's test records, built from its ``--data.source.init_args`` arguments."""
    args = load_experiment(experiment).args
    source = next(a.split("=", 1)[1] for a in args if a.startswith("--data.source="))
    if source.rsplit(".", 1)[-1] != SyntheticResidue.__name__:
        raise SystemExit(f"constant_answer_skill: {experiment} trains on {source}, not SyntheticResidue: the "
                         "constant answers are residues; point --experiment at a residue experiment")
    parser = ArgumentParser()
    parser.add_class_arguments(SyntheticResidue, "source")
    init = parser.parse_args([f"--source.{a.removeprefix(PREFIX)}" for a in args if a.startswith(PREFIX)])
    return SyntheticResidue(**vars(init.source)).load("test")


def skills(records: list[dict]) -> dict:
    moduli = [r["columns"]["num_choices"] for r in records]
    out = {}
    for answer in range(max(moduli)):
        per_prompt = [((r["reference"] == str(answer)) - 1 / k) / (1 - 1 / k) for r, k in zip(records, moduli, strict=True)]
        out[str(answer)] = sum(per_prompt) / len(per_prompt)
    return {"prompts": len(records), "chance": sum(1 / k for k in moduli) / len(moduli), "skill": out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", type=Path, default=EXPERIMENT)
    parser.add_argument("--json", type=Path, help="write the result here (else print it)")
    args = parser.parse_args(argv)
    result = {"experiment": str(args.experiment.resolve().relative_to(ROOT)), **skills(test_split(args.experiment))}
    text = json.dumps(result, indent=1) + "\n"
    if args.json:
        args.json.write_text(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
