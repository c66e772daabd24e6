"""Golden values of METHODS.md section 5 (G = 4, rounded to 4 places): one table row or more per estimator."""

import pytest
import torch

from lit_grpo.estimators import (
    GPG,
    GRPO,
    OPO,
    REGISTRY,
    RLOO,
    DrGRPO,
    MaxRL,
    PassAtK,
    ReinforcePlusPlus,
    Sign,
    SignBalance,
    SoftmaxGRPO,
)

ROWS = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])  # [5, 4]
LENGTHS = torch.tensor([[1, 2, 3, 4]]).expand(5, 4)  # completion lengths in tokens, passed to every estimator

# (advantage of a correct completion, advantage of a wrong one) for each of ROWS
GOLDEN = {
    "GRPO sample": (GRPO(), [(1.5, -0.5), (0.8660, -0.8660), (0.5, -1.5), (0, 0), (0, 0)]),
    "GRPO population": (
        GRPO(std="population"),
        [(1.7321, -0.5774), (1.0, -1.0), (0.5774, -1.7321), (0, 0), (0, 0)],
    ),
    "DrGRPO": (DrGRPO(), [(0.75, -0.25), (0.5, -0.5), (0.25, -0.75), (0, 0), (0, 0)]),
    "RLOO": (RLOO(), [(1.0, -0.3333), (0.6667, -0.6667), (0.3333, -1.0), (0, 0), (0, 0)]),
    "MaxRL": (MaxRL(), [(3.0, -1.0), (1.0, -1.0), (0.3333, -1.0), (0, 0), (0, 0)]),
    "SoftmaxGRPO tau=0.3": (
        SoftmaxGRPO(tau=0.3),
        [(2.6133, -0.8711), (0.9311, -0.9311), (0.3177, -0.9530), (0, 0), (0, 0)],
    ),
    "SignBalance": (SignBalance(), [(1.0, -0.3333), (1.0, -1.0), (1.0, -3.0), (0, 0), (0, 0)]),
    "SignBalance push": (
        SignBalance(all_correct="push"),
        [(1.0, -0.3333), (1.0, -1.0), (1.0, -3.0), (1.0, 0), (0, 0)],
    ),
    "Sign": (Sign(), [(1, -1)] * 5),
    # n = 4, c correct, k = 2. Correct: k C(n-c, 1) / C(n-1, 1) = 2 (4 - c) / 3; wrong: 0.
    "PassAtK k=2": (PassAtK(k=2), [(2.0, 0), (1.3333, 0), (0.6667, 0), (0, 0), (0, 0)]),
    # rho = 1 - C(4-c, 2) / 6: c=1 0.5, c=2 5/6, c=3 1 (every pair passes: no signal).
    # c=1: sigma 0.5, +0.5/0.5 = 1, (0.5 - C(2,1)/C(3,1)) / 0.5 = -1/3.
    # c=2: sigma = sqrt(5/36) = 0.372678, (1/6) / sigma = 0.4472, (1/6 - 1/3) / sigma = -0.4472.
    "PassAtK k=2 normalized": (
        PassAtK(k=2, variant="normalized"),
        [(1.0, -0.3333), (0.4472, -0.4472), (0, 0), (0, 0), (0, 0)],
    ),
    # b = sum_j l_j r_j / sum_j l_j with lengths 1, 2, 3, 4 (sum 10): 1/10, 3/10, 6/10; A = r - b.
    "OPO": (OPO(), [(0.9, -0.1), (0.7, -0.3), (0.4, -0.6), (0, 0), (0, 0)]),
}

# Batch-coupled estimators: the batch is the five groups of ROWS together (20 completions).
GOLDEN_BATCH = {
    # B = 20 completions, M = 8 in the constant groups 1111 and 0000: alpha = 20 / 12; DrGRPO x 5/3.
    "GPG": (GPG(), [(1.25, -0.4167), (0.8333, -0.8333), (0.4167, -1.25), (0, 0), (0, 0)]),
    # DrGRPO's advantages have squares summing to 2 (0.75^2 + 3 0.25^2) + 4 0.5^2 = 2.5 over 20
    # completions: sd = sqrt(2.5 / 19) = 0.362738 (sample), sqrt(2.5 / 20) = 0.353553 (population).
    "ReinforcePlusPlus sample": (
        ReinforcePlusPlus(),
        [(2.0676, -0.6892), (1.3784, -1.3784), (0.6892, -2.0676), (0, 0), (0, 0)],
    ),
    "ReinforcePlusPlus population": (
        ReinforcePlusPlus(std="population"),
        [(2.1213, -0.7071), (1.4142, -1.4142), (0.7071, -2.1213), (0, 0), (0, 0)],
    ),
}


def _expected(pairs: list[tuple[float, float]]) -> torch.Tensor:
    pos, neg = torch.tensor(pairs, dtype=torch.float32).T.unsqueeze(-1)  # [5, 1] each
    return torch.where(ROWS == 1, pos, neg)  # [5, 4]


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_table(name):
    estimator, pairs = GOLDEN[name]
    torch.testing.assert_close(estimator(ROWS, lengths=LENGTHS), _expected(pairs), rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_rows_one_at_a_time(name):
    estimator, pairs = GOLDEN[name]
    rows = torch.cat([estimator(row[None], lengths=LENGTHS[:1]) for row in ROWS])
    torch.testing.assert_close(rows, _expected(pairs), rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", GOLDEN_BATCH)
def test_golden_table_of_batch_coupled_estimators(name):
    estimator, pairs = GOLDEN_BATCH[name]
    torch.testing.assert_close(estimator(ROWS, lengths=LENGTHS), _expected(pairs), rtol=0, atol=1e-4)


def test_every_registered_estimator_has_golden_values():
    tabled = {type(estimator) for estimator, _ in [*GOLDEN.values(), *GOLDEN_BATCH.values()]}
    assert set(REGISTRY.values()) <= tabled, set(REGISTRY.values()) - tabled


def test_grpo_batch_scale_divides_by_the_std_of_the_whole_batch():
    rewards = ROWS[:3]  # [3, 4]
    for std, correction in (("sample", 1), ("population", 0)):
        batch_sd = torch.std(rewards, correction=correction)
        expected = DrGRPO()(rewards) / (batch_sd + 1e-6)
        torch.testing.assert_close(GRPO(std=std, scale="batch")(rewards), expected)


def test_grpo_without_scaling_is_drgrpo():
    rewards = torch.rand(6, 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(GRPO(scale="none")(rewards), DrGRPO()(rewards))
