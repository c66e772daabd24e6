"""Batch-coupled estimators (ReinforcePlusPlus, GPG, GRPO with scale="batch"): a naive second
implementation, the peers' pitfalls, and data-parallel shards that reproduce the global batch."""

import math
import statistics

import pytest
import torch

from lit_grpo.estimators import GPG, GRPO, DrGRPO, ReinforcePlusPlus
from lit_grpo.estimators.functional import sum_over_ranks

NAN = math.nan


def _batch() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    r = (torch.rand(12, 6, generator=gen) < 0.4).double()  # [P, G]
    r[0] = 1.0  # all correct
    r[1] = 0.0  # all wrong
    r[2, :5] = NAN  # one scorable completion
    r[3] = NAN  # none
    r[4, 1] = 0.25
    r[5, [0, 3]] = NAN
    return r


def _groups(rewards: torch.Tensor) -> list[list[tuple[int, float]]]:
    """Each group's scorable (column, reward) pairs."""
    return [[(j, r) for j, r in enumerate(row) if not math.isnan(r)] for row in rewards.tolist()]


def _centred(group: list[tuple[int, float]]) -> dict[int, float]:
    values = [r for _, r in group]
    if len(set(values)) <= 1:  # constant (or a single completion): no signal
        return {j: 0.0 for j, _ in group}
    mean = sum(values) / len(values)
    return {j: r - mean for j, r in group}


def _naive_reinforce_pp(rewards: torch.Tensor, population: bool = False) -> torch.Tensor:
    centred = [_centred(g) for g in _groups(rewards)]
    every = [a for c in centred for a in c.values()]
    sd = statistics.pstdev(every) if population else statistics.stdev(every)
    out = torch.zeros(rewards.shape)
    for p, c in enumerate(centred):
        for j, a in c.items():
            out[p, j] = a / (sd + 1e-6)
    return out


def _naive_gpg(rewards: torch.Tensor) -> torch.Tensor:
    groups = _groups(rewards)
    b = sum(len(g) for g in groups)
    m = sum(len(g) for g in groups if len({r for _, r in g}) <= 1)
    out = torch.zeros(rewards.shape)
    for p, g in enumerate(groups):
        for j, a in _centred(g).items():
            out[p, j] = b / (b - m) * a
    return out


def test_reinforce_pp_matches_a_naive_implementation():
    rewards = _batch()
    torch.testing.assert_close(ReinforcePlusPlus()(rewards), _naive_reinforce_pp(rewards))
    torch.testing.assert_close(
        ReinforcePlusPlus(std="population")(rewards), _naive_reinforce_pp(rewards, population=True)
    )


def test_gpg_matches_a_naive_implementation():
    rewards = _batch()
    torch.testing.assert_close(GPG()(rewards), _naive_gpg(rewards))
    sd = rewards.nan_to_num(0).new_tensor([statistics.stdev(r for _, r in g) if len(g) > 1 else 0.0
                                           for g in _groups(rewards)]).unsqueeze(-1)  # [P, 1]
    torch.testing.assert_close(GPG(normalize="std")(rewards), (_naive_gpg(rewards) / (sd + 1e-6)).float())


def test_gpg_alpha_counts_completions_of_informative_groups_not_nonzero_rewards():
    # alpha = B / (B - M) with M the completions of constant groups: here 8 / 4 = 2. A count of
    # nonzero rewards instead (verl's compute_gpg_outcome_advantage: alpha = bsz / count_nonzero)
    # gives 8 / 5 for 0/1 rewards and 8 / 8 = 1 for -1/+1 rewards.
    for wrong in (0.0, -1.0):
        rewards = torch.tensor([[1.0, wrong, wrong, wrong], [1.0, 1.0, 1.0, 1.0]])
        torch.testing.assert_close(GPG()(rewards), 2 * DrGRPO()(rewards))


def test_gpg_without_constant_groups_is_drgrpo():
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.2, 0.9, NAN]])
    torch.testing.assert_close(GPG()(rewards), DrGRPO()(rewards))
    assert torch.equal(GPG()(torch.ones(3, 4)), torch.zeros(3, 4))  # every group constant: alpha is 1


def test_reinforce_pp_rejects_groups_of_one_in_the_module(sft_model_path):
    # with one completion per prompt the group baseline removes every signal; a run would train on
    # nothing (a known failure of REINFORCE++-baseline with n = 1), so the module refuses it
    from tests.helpers import tiny_module

    for estimator in (ReinforcePlusPlus(), GPG()):
        name = type(estimator).__name__
        with pytest.raises(ValueError, match=f"group_size=1 is too small for {name}, which needs at least 2"):
            tiny_module(sft_model_path, group_size=1, estimator=estimator)


def test_without_a_process_group_the_batch_is_the_tensor_given():
    values = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert not torch.distributed.is_initialized() and sum_over_ranks(values) is values


# --- data parallelism: each rank holds a shard of the batch ------------------------------------------------

SHARDINGS = [slice(0, 7), slice(0, 12)]  # rank 0's groups; rank 1 has the rest (none in the second)


def _coupled() -> dict:
    return {
        "GRPO batch": GRPO(scale="batch"),
        "GRPO batch population": GRPO(std="population", scale="batch"),
        "ReinforcePlusPlus": ReinforcePlusPlus(),
        "GPG": GPG(),
        "GPG std": GPG(normalize="std"),
    }


def _rank(rank: int, init_file: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        rewards, results = _batch(), {}
        for n, cut in enumerate(SHARDINGS):
            shard = rewards[cut] if rank == 0 else rewards[cut.stop :]
            for name, estimator in _coupled().items():  # the same calls, in the same order, on each rank
                results[name, n] = estimator(shard)
        torch.save(results, f"{out}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_reproduce_one_process_on_the_global_batch(tmp_path):
    torch.multiprocessing.spawn(_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    rewards = _batch()
    for name, estimator in _coupled().items():
        whole = estimator(rewards)  # one process, the global batch
        alone = estimator(rewards[SHARDINGS[0]])
        assert not torch.allclose(alone, whole[SHARDINGS[0]])  # a shard alone would scale differently
        for n in range(len(SHARDINGS)):
            torch.testing.assert_close(torch.cat([ranks[0][name, n], ranks[1][name, n]]), whole, msg=name)
