"""How often torch's multinomial picks the same token from two slightly different distributions.

    python bench/sampler_agreement.py                                        # prints the shares
    python bench/sampler_agreement.py --json docs/results/sampler_agreement.json   # docs/pairing.md's figures

Draws ``--draws`` distributions over ``--vocab`` tokens (softmax of standard normal logits) and a perturbed
copy of each (the logits plus normal noise of standard deviation ``--noise``), then samples one token from
each row as the HF engine's decoding loop does (``torch.multinomial(probs, 1)`` from torch's global
generator): the original and the perturbed rows with the same seed, and the perturbed rows with another
seed. Prints the share of rows whose two tokens are the same in each case, and the chance agreement
``sum_v p_v q_v`` averaged over rows. Deterministic given its seeds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def agreement(vocab: int, noise: float, draws: int, seed: int = 0, data_seed: int = 1234) -> dict[str, float]:
    """Shares of rows that draw the same token: same seed, another seed; and the mean chance agreement."""
    gen = torch.Generator().manual_seed(data_seed)
    logits = torch.randn(draws, vocab, generator=gen)  # [D, V]
    perturbed = logits + noise * torch.randn(draws, vocab, generator=gen)  # [D, V]
    p, q = logits.softmax(-1), perturbed.softmax(-1)  # [D, V]

    def sample(probs: torch.Tensor, s: int) -> torch.Tensor:
        torch.manual_seed(s)
        return torch.multinomial(probs, num_samples=1).squeeze(1)  # [D]

    base = sample(p, seed)
    return {
        "same_seed": (base == sample(q, seed)).double().mean().item(),
        "other_seed": (base == sample(q, seed + 1)).double().mean().item(),
        "chance": (p * q).sum(-1).mean().item(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument(
        "--noise", type=float, default=0.05, help="standard deviation of the noise added to the logits"
    )
    p.add_argument("--draws", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0, help="sampling seed (the other seed is this + 1)")
    p.add_argument(
        "--data-seed", type=int, default=1234, help="seed of the distributions and their perturbation"
    )
    p.add_argument("--json", type=Path, help="also write the settings and the shares to this file")
    args = p.parse_args()
    shares = agreement(args.vocab, args.noise, args.draws, args.seed, args.data_seed)
    for name, value in shares.items():
        print(f"{name}: {value:.4f}")
    if args.json:
        settings = {k: getattr(args, k) for k in ("vocab", "noise", "draws", "seed", "data_seed")}
        settings["torch"] = torch.__version__
        args.json.write_text(json.dumps({"settings": settings, **shares}, indent=1) + "\n")


if __name__ == "__main__":
    main()
