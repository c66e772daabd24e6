"""PassAtK: the accumulated curve against brute-force enumeration, and what setup refuses."""

import itertools
from types import SimpleNamespace

import pytest
import torch

from lit_grpo.callbacks import PassAtK, PassAtKMetric
from lit_grpo.types import PromptBatch


def brute_force_pass_at_k(correct: list[bool], k: int) -> float:
    """Share of the k-subsets of the samples that contain a correct one."""
    subsets = list(itertools.combinations(correct, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_metric_matches_subset_enumeration_over_several_batches():
    gen = torch.Generator().manual_seed(0)
    n = 8
    batches = [torch.rand(p, n, generator=gen) < torch.rand(p, 1, generator=gen) for p in (3, 5, 1)]
    metric = PassAtKMetric(n)
    for b in batches:
        metric.update(b)
    got = metric.compute().tolist()
    rows = torch.cat(batches).tolist()
    assert metric.ks == [1, 2, 4, 8]
    for k, value in zip(metric.ks, got, strict=True):
        assert value == pytest.approx(sum(brute_force_pass_at_k(r, k) for r in rows) / len(rows), abs=1e-12)


def test_metric_curve_is_monotone_and_ends_at_any_correct():
    correct = torch.tensor([[True, False, False, False, False, False], [False] * 6, [True] * 6])
    metric = PassAtKMetric(6)
    metric.update(correct)
    curve = metric.compute().tolist()
    assert metric.ks == [1, 2, 4, 6]
    assert curve == sorted(curve)
    assert curve[-1] == pytest.approx(2 / 3)  # pass@n: the prompt has a correct sample at all
    assert curve[0] == pytest.approx((1 / 6 + 0 + 1) / 3)


def test_metric_rejects_the_wrong_number_of_samples():
    with pytest.raises(ValueError, match=r"\[P, n=4\]"):
        PassAtKMetric(4).update(torch.ones(2, 3, dtype=torch.bool))


class _Engine:
    """Completions that are correct for the first ``c`` samples of each prompt."""

    def __init__(self, c):
        self.c = c

    def rollout(self, batch, n, sampling):
        return SimpleNamespace(
            texts=["1" if j < self.c else "0" for _ in batch.prompts for j in range(n)], group_size=n, episodes=None
        )


def _module(c):
    def score(batch, rollouts):
        rewards = torch.tensor([float(t == "1") for t in rollouts.texts]).view(
            len(batch), rollouts.group_size
        )
        return rewards, None

    return SimpleNamespace(
        engine=_Engine(c), score=score, sampling=SimpleNamespace(temperature=1.0), device=torch.device("cpu")
    )


def test_update_respects_max_prompts_and_counts_correct_samples():
    cb = PassAtK(n=4, max_prompts=3)
    batch = PromptBatch(prompts=["a", "b"], references=["1", "1"], ids=["0", "1"])
    for _ in range(3):
        cb.update(_module(c=1), batch)
    assert int(cb.metric.count) == 3
    curve = cb.curve()
    assert curve == pytest.approx({1: 0.25, 2: 0.5, 4: 1.0})
    assert int(cb.metric.count) == 0  # reading the curve resets it


def _trainer(loggers, val_batches):
    dm = SimpleNamespace(val_dataloader=lambda: val_batches)
    return SimpleNamespace(loggers=loggers, datamodule=dm, limit_val_batches=1.0)


def test_setup_names_the_missing_validation_data_and_logger():
    from lightning.pytorch.loggers import CSVLogger

    module = _module(c=1)
    with pytest.raises(ValueError, match="PassAtK needs validation prompts.*num_val"):
        PassAtK().setup(_trainer([object()], []), module, "fit")
    with pytest.raises(ValueError, match="PassAtK logs metrics but the Trainer has no logger"):
        PassAtK().setup(_trainer([], [1]), module, "fit")
    with pytest.raises(ValueError, match="PassAtK writes TensorBoard.*CSVLogger.*log_figure: false"):
        PassAtK().setup(_trainer([CSVLogger("unused")], [1]), module, "fit")
    PassAtK(log_figure=False).setup(_trainer([CSVLogger("unused")], [1]), module, "fit")
    with pytest.raises(TypeError, match="PassAtK needs a lit_grpo GRPOModule"):
        PassAtK().setup(_trainer([object()], [1]), SimpleNamespace(), "fit")


def test_options_are_validated():
    with pytest.raises(ValueError, match="n=0"):
        PassAtK(n=0)
    with pytest.raises(ValueError, match="max_prompts=0"):
        PassAtK(max_prompts=0)
    with pytest.raises(ValueError, match="temperature=0"):
        PassAtK(temperature=0)
