"""The conformance cases: golden rewards, masks and log-probs, each peer setting, and the lit-grpo config
documented as its equivalent (lit-grpo's side only: no peer is imported here).

``bench/conformance.py`` runs each case's peer functions in the peers' environment and records their
numbers in ``bench/conformance_reference.json``; ``tests/bench/test_conformance.py`` recomputes lit-grpo's side
of every case in the main environment and checks it against those recorded numbers.

A case compares up to three quantities, each on golden inputs (P = 4 prompts x G = 4 completions, at most
T = 6 completion tokens):

- ``advantages [N]``: the peer's advantage estimator and lit-grpo's on the same rewards;
- ``weights [N, T]``: the aggregation's token weights, d(batch loss)/d(token loss), i.e. what each token's
  loss counts in the batch loss (measured through the peer's aggregation with every advantage 1, on-policy);
- ``loss`` and ``grad [N, T]``: the batch loss and its gradient with respect to the current log-probs, with
  fixed golden advantages and old log-probs whose ratios span 0.26 to 5.5 (so the clip and the dual clip
  are active), and the
  reference log-probs when the case has a KL term;
- ``kl [N, T]``: a KL estimator's per-token values.

A new loss variant (GSPO, CISPO, SAPO, GMPO, ...) is added as a case here (its lit-grpo config in ``loss``)
and its peer call in ``bench/conformance.py``; cases whose ``lit`` is ``None`` have peer numbers recorded but
no lit-grpo equivalent yet.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

P, G, T = 4, 4, 6
N = P * G
#: Completion lengths of the golden batch (1 .. T tokens, the longest and the shortest included).
LENGTHS = (1, 3, 6, 2, 6, 5, 1, 4, 2, 6, 3, 3, 5, 1, 6, 2)
#: Rewards [P, G] of the golden batches.
REWARDS = {
    # an informative group, an all-correct group, an all-wrong group, a single correct completion
    "binary": [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]],
    # scalar rewards, one group constant up to float noise (a spread of 3e-7)
    "scalar": [[0.9, 0.2, 0.5, 0.4], [0.5, 0.5, 0.5, 0.5000003], [0.1, 0.7, 0.7, 0.3], [1.0, 0.0, 0.25, 0.0]],
    # unscorable completions (NaN): left out of the group statistics, advantage 0
    "unscorable": [[1.0, math.nan, 0.0, 1.0], [math.nan, math.nan, 1.0, 0.0], [1.0, 1.0, math.nan, 1.0],
                   [0.0, 0.0, 0.0, 1.0]],
}  # fmt: skip
TOLERANCE = 1e-6


def mask() -> Tensor:
    """``[N, T]`` bool: the first ``LENGTHS[i]`` tokens of completion i."""
    return torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]


def rewards(name: str) -> Tensor:
    return torch.tensor(REWARDS[name], dtype=torch.float32)  # [P, G]


def logprobs() -> dict[str, Tensor]:
    """Golden current, old and reference log-probs ``[N, T]`` (0 on padding) and advantages ``[N]``."""
    gen = torch.Generator().manual_seed(0)
    m = mask().float()
    logp = -2.0 * torch.rand(N, T, generator=gen) * m
    old = (logp + 0.7 * torch.randn(N, T, generator=gen)) * m
    ref = (logp + 0.5 * torch.randn(N, T, generator=gen)) * m
    adv = torch.randn(N, generator=gen)
    adv[[1, 6]] = 0.0  # starved completions
    return {"logp": logp, "old": old, "ref": ref, "advantages": adv}


@dataclass(frozen=True)
class Case:
    """One peer setting and the lit-grpo config documented as its equivalent."""

    id: str  # "<peer>/<setting>[/<golden>]", the key of the reference file
    peer: str  # trl | verl | openrlhf
    setting: dict  # the peer's own option names and values (what the peer runner reads)
    lit: str | None  # the lit-grpo config, as a user writes it; None: no equivalent in lit-grpo yet
    quantities: tuple[str, ...]  # among advantages, weights, loss, kl
    golden: str = "binary"  # which REWARDS the advantages are computed on
    estimator: Callable[[Tensor], Tensor] | None = None  # rewards [P, G] -> advantages [P, G]
    aggregation: str | None = None
    loss: Callable[[], object] | None = None  # -> a lit_grpo PolicyLoss
    kl: str | None = None  # lit-grpo's KL estimator name
    note: str = ""  # why a documented difference exists (empty: expected equal)
    extra: dict = field(default_factory=dict)


def lit_side(case: Case) -> dict[str, list]:
    """lit-grpo's numbers for ``case`` (same keys as the peer's in the reference file)."""
    from lit_grpo.logprobs import kl_estimate
    from lit_grpo.losses import LossInputs, token_weights

    out: dict[str, list] = {}
    m = mask()
    if "advantages" in case.quantities:
        out["advantages"] = case.estimator(rewards(case.golden)).reshape(-1).tolist()
    lp = logprobs()
    if "weights" in case.quantities:
        out["weights"] = token_weights(m, case.aggregation, T).tolist()
    if "loss" in case.quantities:
        weights = token_weights(m, case.aggregation, T)
        logp = lp["logp"].clone().requires_grad_(True)
        loss_fn = case.loss()
        ref = lp["ref"] if loss_fn.needs_ref_logp else None
        batch = LossInputs(logp, lp["old"], None, ref, lp["advantages"], m, weights)
        total = (loss_fn(batch).loss * weights).sum()
        total.backward()
        out["loss"] = [total.item()]
        out["grad"] = (logp.grad * m).tolist()
    if "kl" in case.quantities:
        out["kl"] = (kl_estimate(lp["logp"], lp["ref"], case.kl) * m).tolist()
    return out


def max_difference(a: list, b: list) -> float:
    """Largest absolute difference of two nested lists of numbers (NaN where they disagree on NaN)."""
    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    if x.shape != y.shape:
        return math.inf
    if not torch.equal(x.isnan(), y.isnan()):
        return math.nan
    both = ~x.isnan()
    return float((x[both] - y[both]).abs().max()) if both.any() else 0.0


def _cases() -> list[Case]:
    from lit_grpo import GPG, GRPO, RLOO, DrGRPO, PassAtK, PPOClip, ReinforcePlusPlus
    from lit_grpo.estimators.functional import opo_advantages

    def opo(r: Tensor) -> Tensor:
        return opo_advantages(r, torch.tensor(LENGTHS, dtype=torch.float32).view(P, G))

    cases: list[Case] = []
    # ---- TRL: scale_rewards (the advantages; TRL divides by std + 1e-4) ------------------------------
    trl_adv = {"group": ("GRPO(eps=1e-4)", lambda: GRPO(eps=1e-4)),
               "batch": ("GRPO(scale=batch, eps=1e-4)", lambda: GRPO(scale="batch", eps=1e-4)),
               "none": ("DrGRPO()", lambda: DrGRPO())}  # fmt: skip
    for scale, (lit, make) in trl_adv.items():
        for golden in ("binary", "scalar", "unscorable"):
            note = ""
            if golden == "scalar" and scale == "group":
                note = ("a group constant up to float noise (spread 3e-7): TRL divides its noise by "
                        "std + 1e-4 and gives small nonzero advantages; lit-grpo calls the group constant "
                        "(spread within 1e-6 of its scale) and gives exactly 0")  # fmt: skip
            cases.append(Case(f"trl/scale_rewards={scale}/{golden}", "trl", {"scale_rewards": scale}, lit,
                              ("advantages",), golden, estimator=make(), note=note))  # fmt: skip
    # ---- TRL: loss_type (the aggregation, the clipped loss, its KL term) -----------------------------
    trl_loss = {
        "grpo": ("seq-mean-token-mean", {}), "bnpo": ("token-mean", {}), "dapo": ("token-mean", {}),
        "dr_grpo": ("seq-sum-constant", {}),
    }  # fmt: skip
    for loss_type, (agg, _) in trl_loss.items():
        cases.append(Case(f"trl/loss_type={loss_type}", "trl", {"loss_type": loss_type},
                          f"aggregation: {agg}, loss: PPOClip()", ("weights", "loss"), aggregation=agg,
                          loss=lambda: PPOClip()))  # fmt: skip
    cases += [
        Case("trl/loss_type=dapo,epsilon_high=0.28", "trl", {"loss_type": "dapo", "epsilon_high": 0.28},
             "aggregation: token-mean, loss: PPOClip(eps_high=0.28)", ("loss",), aggregation="token-mean",
             loss=lambda: PPOClip(eps_high=0.28)),
        Case("trl/loss_type=dapo,beta=0.04", "trl", {"loss_type": "dapo", "beta": 0.04},
             "aggregation: token-mean, loss: PPOClip(beta=0.04, kl_estimator=k3)", ("loss",),
             aggregation="token-mean", loss=lambda: PPOClip(beta=0.04),
             note="TRL multiplies the KL term by the importance ratio by default (use_bias_correction_kl=True, "
                  "DeepSeek-V3.2's unbiased reverse-KL gradient), which changes the gradient even on-policy; "
                  "PPOClip's KL term is not reweighted: equal with use_bias_correction_kl=False (next row)"),
        Case("trl/loss_type=dapo,beta=0.04,use_bias_correction_kl=False", "trl",
             {"loss_type": "dapo", "beta": 0.04, "use_bias_correction_kl": False},
             "aggregation: token-mean, loss: PPOClip(beta=0.04, kl_estimator=k3)", ("loss",),
             aggregation="token-mean", loss=lambda: PPOClip(beta=0.04)),
        Case("trl/loss_type=dapo,delta=3", "trl", {"loss_type": "dapo", "delta": 3.0},
             "aggregation: token-mean, loss: PPOClip(dual_clip=3)", ("loss",), aggregation="token-mean",
             loss=lambda: PPOClip(dual_clip=3.0)),
    ]
    for loss_type in ("cispo", "sapo", "luspo", "vespo"):
        cases.append(Case(f"trl/loss_type={loss_type}", "trl", {"loss_type": loss_type}, None, ("loss",)))
    cases.append(Case("trl/importance_sampling_level=sequence", "trl",
                      {"loss_type": "grpo", "importance_sampling_level": "sequence"}, None, ("loss",)))  # GSPO
    # ---- verl: core_algos advantage estimators -------------------------------------------------------
    verl_adv = [
        ("grpo", {"norm_adv_by_std_in_grpo": True}, "GRPO()", lambda: GRPO(), ""),
        ("grpo_vectorized", {"norm_adv_by_std_in_grpo": True}, "GRPO()", lambda: GRPO(), ""),
        ("grpo", {"norm_adv_by_std_in_grpo": False}, "DrGRPO()", lambda: DrGRPO(), ""),
        ("rloo", {}, "RLOO()", lambda: RLOO(), ""),
        ("rloo_vectorized", {}, "RLOO()", lambda: RLOO(), ""),
        ("reinforce_plus_plus_baseline", {}, "ReinforcePlusPlus()", lambda: ReinforcePlusPlus(),
         "verl whitens over tokens (a length-weighted mean is subtracted again and the std is taken over "
         "tokens), lit-grpo over completions (docs/methods.md, section 1)"),
        ("gpg", {}, "GPG()", lambda: GPG(),
         "verl's alpha is batch size / count_nonzero(rewards), the paper's is B / (B - M) completions of "
         "informative groups (docs/methods.md, section 1)"),
        ("opo", {}, "opo_advantages(rewards, lengths)", lambda: opo, ""),
        ("grpo_passk", {"norm_adv_by_std_in_grpo": False}, "PassAtK(k=G=4)", lambda: PassAtK(k=4),
         "binary rewards: the same direction (only a unique correct completion is credited, with max - second "
         "max), scaled by k = G in lit-grpo's PassAtK, the factor of the unbiased pass@k gradient; scalar "
         "rewards: PassAtK counts r >= 0.5 as correct, verl uses the raw rewards"),
    ]  # fmt: skip
    for name, opts, lit, make, note in verl_adv:
        for golden in ("binary", "scalar"):
            suffix = "" if not opts else "," + ",".join(f"{k}={v}" for k, v in opts.items())
            n = note
            if golden == "scalar" and name in ("grpo", "grpo_vectorized") and opts.get("norm_adv_by_std_in_grpo"):
                n = ("a group constant up to float noise (spread 3e-7): verl divides its noise by std + 1e-6 "
                     "and gives advantages of order 1; lit-grpo gives exactly 0")  # fmt: skip
            cases.append(Case(f"verl/adv_estimator={name}{suffix}/{golden}", "verl", {"adv_estimator": name, **opts},
                              lit, ("advantages",), golden, estimator=make(), note=n))  # fmt: skip
    # ---- verl: policy loss and loss_agg_mode ---------------------------------------------------------
    verl_agg = {"token-mean": "token-mean", "seq-mean-token-mean": "seq-mean-token-mean",
                "seq-mean-token-sum": "seq-mean-token-sum", "seq-mean-token-sum-norm": "seq-sum-constant"}  # fmt: skip
    for mode, agg in verl_agg.items():
        cases.append(Case(f"verl/policy_loss=vanilla,loss_agg_mode={mode}", "verl",
                          {"policy_loss": "vanilla", "loss_agg_mode": mode, "clip_ratio_c": 3.0},
                          f"aggregation: {agg}, loss: PPOClip(dual_clip=3)", ("weights", "loss"), aggregation=agg,
                          loss=lambda: PPOClip(dual_clip=3.0)))  # fmt: skip
    cases.append(Case("verl/policy_loss=vanilla,loss_agg_mode=token-mean,clip_ratio_high=0.28", "verl",
                      {"policy_loss": "vanilla", "loss_agg_mode": "token-mean", "clip_ratio_c": 3.0,
                       "clip_ratio_high": 0.28},
                      "aggregation: token-mean, loss: PPOClip(eps_high=0.28, dual_clip=3)", ("loss",),
                      aggregation="token-mean", loss=lambda: PPOClip(eps_high=0.28, dual_clip=3.0)))  # fmt: skip
    cases.append(Case("verl/loss_agg_mode=token-sum", "verl", {"loss_agg_mode": "token-sum"}, None, ("weights",)))
    for name in ("gspo", "sapo", "cispo", "geo_mean", "gpg"):
        cases.append(Case(f"verl/policy_loss={name}", "verl", {"policy_loss": name, "loss_agg_mode": "token-mean"},
                          None, ("loss",)))  # fmt: skip
    for peer_name, lit_name in (("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3")):
        cases.append(Case(f"verl/kl_penalty={peer_name}", "verl", {"kl_penalty": peer_name},
                          f"PPOClip(kl_estimator={lit_name})", ("kl",), kl=lit_name))  # fmt: skip
    # ---- OpenRLHF: PolicyLoss and its aggregation ----------------------------------------------------
    cases += [
        Case("openrlhf/PolicyLoss(token_level_loss=True)", "openrlhf", {"token_level_loss": True},
             "aggregation: token-mean, loss: PPOClip()", ("weights", "loss"), aggregation="token-mean",
             loss=lambda: PPOClip()),
        Case("openrlhf/PolicyLoss(token_level_loss=False)", "openrlhf", {"token_level_loss": False},
             "aggregation: seq-mean-token-mean, loss: PPOClip()", ("weights", "loss"),
             aggregation="seq-mean-token-mean", loss=lambda: PPOClip()),
        Case("openrlhf/PolicyLoss(dual_clip=3)", "openrlhf", {"token_level_loss": True, "dual_clip": 3.0},
             "aggregation: token-mean, loss: PPOClip(dual_clip=3)", ("loss",), aggregation="token-mean",
             loss=lambda: PPOClip(dual_clip=3.0)),
        Case("openrlhf/PolicyLoss(clip_eps_high=0.28)", "openrlhf", {"token_level_loss": True, "clip_eps_high": 0.28},
             "aggregation: token-mean, loss: PPOClip(eps_high=0.28)", ("loss",), aggregation="token-mean",
             loss=lambda: PPOClip(eps_high=0.28)),
        Case("openrlhf/PolicyLoss(policy_loss_type=gspo)", "openrlhf", {"policy_loss_type": "gspo"}, None,
             ("loss",)),
    ]
    for name in ("k1", "k2", "k3"):
        cases.append(Case(f"openrlhf/compute_approx_kl(kl_estimator={name})", "openrlhf", {"kl_estimator": name},
                          f"PPOClip(kl_estimator={name})", ("kl",), kl=name))  # fmt: skip
    return cases


CASES = _cases()
