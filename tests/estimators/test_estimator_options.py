"""Invalid options and invalid rewards fail early with a message naming the option and the fix."""

import math

import pytest
import torch

from lit_grpo.estimators import (
    GPG,
    GRPO,
    RLOO,
    DrGRPO,
    MaxRL,
    PassAtK,
    ReinforcePlusPlus,
    Sign,
    SignBalance,
    SoftmaxGRPO,
)
from lit_grpo.estimators.functional import (
    gpg_advantages,
    grpo_advantages,
    opo_advantages,
    pass_at_k_advantages,
    reinforce_pp_advantages,
    softmax_advantages,
)

INVALID = [
    (
        lambda: GRPO(std="unbiased"),
        ValueError,
        r"GRPO std must be one of 'sample', 'population'; got 'unbiased'",
    ),
    (
        lambda: GRPO(scale="token"),
        ValueError,
        r"GRPO scale must be one of 'group', 'batch', 'none'; got 'token'",
    ),
    (lambda: GRPO(eps=0.0), ValueError, r"GRPO eps must be finite and > 0, got 0.0; use e.g. 1e-6"),
    (lambda: GRPO(eps=-1e-6), ValueError, r"GRPO eps must be finite and > 0, got -1e-06"),
    (lambda: GRPO(eps="small"), TypeError, r"GRPO eps must be a number, got str 'small'"),
    (
        lambda: SoftmaxGRPO(tau=0.0),
        ValueError,
        r"SoftmaxGRPO tau must be finite and > 0, got 0.0; use e.g. 0.1",
    ),
    (lambda: SoftmaxGRPO(tau=-0.3), ValueError, r"SoftmaxGRPO tau must be finite and > 0, got -0.3"),
    (lambda: SoftmaxGRPO(tau=math.inf), ValueError, r"SoftmaxGRPO tau must be finite and > 0, got inf"),
    (lambda: SoftmaxGRPO(tau=math.nan), ValueError, r"SoftmaxGRPO tau must be finite and > 0, got nan"),
    (lambda: SoftmaxGRPO(tau=True), TypeError, r"SoftmaxGRPO tau must be a number, got bool True"),
    (lambda: MaxRL(eps=0), ValueError, r"MaxRL eps must be finite and > 0, got 0; use e.g. 1e-6"),
    (lambda: SignBalance(c=0.0), ValueError, r"SignBalance c must be finite and > 0, got 0.0; use e.g. 1.0"),
    (lambda: SignBalance(c=-1.0), ValueError, r"SignBalance c must be finite and > 0, got -1.0"),
    (
        lambda: SignBalance(all_correct="all"),
        ValueError,
        r"all_correct must be one of 'zero', 'push'; got 'all'",
    ),
    (
        lambda: ReinforcePlusPlus(std="unbiased"),
        ValueError,
        r"ReinforcePlusPlus std must be one of 'sample', 'population'; got 'unbiased'",
    ),
    (lambda: ReinforcePlusPlus(eps=0.0), ValueError, r"ReinforcePlusPlus eps must be finite and > 0, got 0.0"),
    (lambda: GPG(normalize="group"), ValueError, r"GPG normalize must be one of 'none', 'std'; got 'group'"),
    (lambda: GPG(eps=-1.0), ValueError, r"GPG eps must be finite and > 0, got -1.0; use e.g. 1e-6"),
    (lambda: PassAtK(k=0), ValueError, r"PassAtK k must be >= 1, got 0; use e.g. 4 .at most group_size."),
    (lambda: PassAtK(k=2.0), TypeError, r"PassAtK k must be an integer, got float 2.0"),
    (lambda: PassAtK(k=True), TypeError, r"PassAtK k must be an integer, got bool True"),
    (
        lambda: PassAtK(variant="loo"),
        ValueError,
        r"PassAtK variant must be one of 'unbiased', 'normalized'; got 'loo'",
    ),
    (lambda: grpo_advantages(torch.zeros(1, 2), std="unbiased"), ValueError, r"std must be one of"),
    (lambda: reinforce_pp_advantages(torch.zeros(1, 2), eps=0), ValueError, r"eps must be finite and > 0"),
    (lambda: gpg_advantages(torch.zeros(1, 2), normalize="x"), ValueError, r"normalize must be one of"),
    (lambda: pass_at_k_advantages(torch.zeros(1, 2), k=-1), ValueError, r"k must be >= 1, got -1"),
    (
        lambda: opo_advantages(torch.zeros(2, 3), torch.ones(6)),
        ValueError,
        r"lengths must have the rewards' shape .2, 3., got .6,.; pass the completion lengths as",
    ),
    (
        lambda: opo_advantages(torch.zeros(1, 3), torch.tensor([[1.0, -2.0, math.nan]])),
        ValueError,
        r"lengths contain 2 negative or non-finite value.s.",
    ),
    (
        lambda: opo_advantages(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)),
        TypeError,
        r"lengths must be integer or floating token counts, got torch.bool",
    ),
    (lambda: opo_advantages(torch.zeros(1, 2), [[1, 2]]), TypeError, r"lengths must be a torch.Tensor"),
    (lambda: softmax_advantages(torch.zeros(1, 2), tau=0), ValueError, r"tau must be finite and > 0"),
]


@pytest.mark.parametrize(("build", "error", "message"), INVALID, ids=[m[:40] for *_, m in INVALID])
def test_invalid_options_are_rejected(build, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        build()


ESTIMATORS = [
    GRPO(), DrGRPO(), RLOO(), Sign(), SoftmaxGRPO(), MaxRL(), SignBalance(), ReinforcePlusPlus(), GPG(), PassAtK(),
]  # fmt: skip
INVALID_REWARDS = [
    (torch.zeros(8), ValueError, r"shape \[P, G\] with G >= 1, got \(8,\); reshape"),
    (torch.zeros(2, 2, 2), ValueError, r"shape \[P, G\] with G >= 1, got \(2, 2, 2\)"),
    (torch.zeros(2, 0), ValueError, r"shape \[P, G\] with G >= 1, got \(2, 0\)"),
    (
        torch.ones(2, 4, dtype=torch.long),
        TypeError,
        r"floating tensor.*got torch.int64; convert with rewards.float\(\)",
    ),
    ([[1.0, 0.0]], TypeError, r"rewards must be a torch.Tensor \[P, G\], got list"),
]


@pytest.mark.parametrize(("rewards", "error", "message"), INVALID_REWARDS, ids=lambda x: "")
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_invalid_rewards_are_rejected(estimator, rewards, error, message):
    with pytest.raises(error, match=message):
        estimator(rewards)


def test_empty_batch_gives_empty_advantages():
    for estimator in ESTIMATORS:
        assert estimator(torch.zeros(0, 4)).shape == (0, 4)


def test_sign_all_wrong_zero_removes_only_the_push_down_of_all_wrong_groups():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, float("nan"), 0.0, 0.0]])
    assert Sign()(rewards).tolist() == [[-1.0] * 4, [1.0, -1.0, -1.0, -1.0], [1.0] * 4, [-1.0, 0.0, -1.0, -1.0]]
    ablation = Sign(all_wrong="zero")(rewards)
    assert ablation.tolist() == [[0.0] * 4, [1.0, -1.0, -1.0, -1.0], [1.0] * 4, [0.0] * 4]
    assert repr(Sign(all_wrong="zero")) == "Sign(all_wrong='zero')"
    with pytest.raises(ValueError, match="Sign all_wrong must be one of 'push', 'zero'"):
        Sign(all_wrong="none")
