"""Invalid options and invalid rewards fail early with a message naming the option and the fix."""

import math

import pytest
import torch

from lit_grpo.estimators import GRPO, RLOO, DrGRPO, MaxRL, Sign, SignBalance, SoftmaxGRPO
from lit_grpo.estimators.functional import grpo_advantages, softmax_advantages

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
    (lambda: grpo_advantages(torch.zeros(1, 2), std="unbiased"), ValueError, r"std must be one of"),
    (lambda: softmax_advantages(torch.zeros(1, 2), tau=0), ValueError, r"tau must be finite and > 0"),
]


@pytest.mark.parametrize(("build", "error", "message"), INVALID, ids=[m[:40] for *_, m in INVALID])
def test_invalid_options_are_rejected(build, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        build()


ESTIMATORS = [GRPO(), DrGRPO(), RLOO(), Sign(), SoftmaxGRPO(), MaxRL(), SignBalance()]
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
