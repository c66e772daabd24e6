"""Common random numbers: what two arms of one seed share.

Runs of one seed draw the same prompts at every step (the training order depends on ``data.seed`` alone)
and reseed torch, numpy and ``random`` from ``(seed, step, rank)`` before every step, so arms that differ
only in what they do with the rollouts (the estimator, the loss) sample their first step's completions
with the same random numbers from the same weights: the same completions. Random draws elsewhere (a
callback, validation) do not shift the next step's stream. docs/pairing.md says what this pairs once
the policies diverge.
"""

from __future__ import annotations

import random

import lightning as L
import numpy as np
import pytest
import torch

from lit_grpo import GRPO, Sign
from lit_grpo.estimators.functional import constant_groups
from lit_grpo.lab.pairing import Pairing, shared
from tests.helpers import tiny_data, tiny_module, tiny_trainer

STEPS = 2


class Record(L.Callback):
    """Per training step: the main stream's prompts, the prompts trained on, their completions and rewards."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self._main: list[str] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._main = list(batch.prompts)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        stats = outputs["rollout"]
        self.steps.append({"main": self._main, "prompts": list(stats.batch.prompts), "texts": list(stats.texts),
                           "rewards": stats.rewards.clone()})  # fmt: skip


class DrawRandomNumbers(L.Callback):
    """Consumes torch, numpy and ``random`` draws around every step (its hooks run before the module's)."""

    def _draw(self) -> None:
        torch.rand(1000)
        np.random.rand(100)
        random.random()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._draw()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._draw()


def _run(tmp_path, model: str, callbacks=(), trainer_args=None, **module_args):
    L.seed_everything(0)
    record = Record()
    trainer = tiny_trainer(tmp_path, max_steps=STEPS, callbacks=[record, *callbacks], **(trainer_args or {}))
    module = tiny_module(model, **module_args)
    trainer.fit(module, datamodule=tiny_data(seed=0))
    assert len(record.steps) == STEPS
    return record.steps, {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


@pytest.fixture(scope="module")
def plain(tmp_path_factory, sft_model_path):
    """The reference arm: GRPO, seed 0."""
    return _run(tmp_path_factory.mktemp("plain"), sft_model_path, estimator=GRPO())


def test_two_estimators_of_one_seed_see_the_same_prompts_and_first_completions(tmp_path, sft_model_path, plain):
    grpo, grpo_weights = plain
    sign, sign_weights = _run(tmp_path, sft_model_path, estimator=Sign())
    for step in range(STEPS):
        assert grpo[step]["prompts"] == sign[step]["prompts"], step
    assert grpo[0]["texts"] == sign[0]["texts"]  # same weights, same random numbers
    # the estimators did train apart: the weights differ, so later completions need not agree
    assert any(not torch.equal(grpo_weights[k], sign_weights[k]) for k in grpo_weights)


def test_random_draws_outside_the_step_do_not_shift_the_sampling_stream(tmp_path, sft_model_path, plain):
    # the same arm with a callback drawing random numbers and a sampled validation pass after every step
    busy, _ = _run(tmp_path, sft_model_path, callbacks=[DrawRandomNumbers()], estimator=GRPO(), val_samples=2,
                   trainer_args={"limit_val_batches": 1, "val_check_interval": 1})  # fmt: skip
    for step in range(STEPS):
        assert plain[0][step]["texts"] == busy[step]["texts"], step


def test_dynamic_sampling_keeps_the_prompt_stream_and_the_first_draw(tmp_path, sft_model_path, plain):
    plain, _ = plain
    filtered, _ = _run(tmp_path, sft_model_path, estimator=GRPO(), filter_degenerate=True)
    for step in range(STEPS):  # refills come from a stream of their own: the main stream is the same
        assert plain[step]["main"] == filtered[step]["main"], step
    # at step 0 the filtered arm kept exactly the plain arm's informative groups of the first draw, with the
    # same completions, and put refilled groups after them
    first, kept = plain[0], filtered[0]
    g = first["rewards"].shape[1]
    informative = (~constant_groups(first["rewards"]))[:, 0].nonzero()[:, 0].tolist()
    assert kept["prompts"][: len(informative)] == [first["prompts"][i] for i in informative]
    for j, i in enumerate(informative):
        assert kept["texts"][j * g : (j + 1) * g] == first["texts"][i * g : (i + 1) * g]


def _pairing(**changes) -> Pairing:
    values = {"seed_everything": "0", "data seed": "0", "data source": "Synthetic()", "prompts per step": "4",
              "processes": "1", "optimizer steps per batch": "1", "model": "m", "group size": "4",
              "engine": "HFGenerateEngine", "sampling": "temperature=1.0"}  # fmt: skip
    return Pairing(tuple({**values, **changes}.items()))


def test_the_report_says_what_breaks_the_pairing():
    assert set(shared(_pairing(), _pairing()).values()) == {"yes"}
    # more optimizer steps per rollout batch: later steps are seeded at other step numbers
    s = shared(_pairing(), _pairing(**{"optimizer steps per batch": "2"}))
    assert s["prompts of every step"] == "yes" and s["step 0 completions"] == "yes"
    assert s["sampling seed of every step"] == "no: optimizer steps per batch 1 vs 2 (only step 0's is shared)"
    s = shared(_pairing(), _pairing(**{"data seed": "1", "sampling": "temperature=0.7"}))
    assert s["prompts of every step"] == "no: data seed 0 vs 1" and s["sampling seed of every step"] == "yes"
    assert s["step 0 completions"] == "no: data seed 0 vs 1, sampling temperature=1.0 vs temperature=0.7"
    s = shared(_pairing(seed_everything="random"), _pairing(seed_everything="random"))
    assert s["sampling seed of every step"].startswith("no: seed_everything is not fixed")
    assert "refilled prompts" in shared(_pairing(), Pairing(_pairing().values, dynamic_sampling=True))
