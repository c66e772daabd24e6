"""The prompt curriculum: running pass rates by hand, retirement, skipping in the training step, and a resumed
run that retires exactly what the uninterrupted one does."""

import math

import lightning as L
import pytest
import torch

from lit_grpo import PromptCurriculum, PromptDataModule, RewardFunction, SyntheticArithmetic
from lit_grpo.types import RewardOutput
from tests.helpers import tiny_module, tiny_trainer
from tests.recording import Record


def test_running_rate_and_retirement_by_hand():
    c = PromptCurriculum(retire_above=0.9, retire_below=0.1, min_visits=2, smoothing=0.5)
    c.observe([("a", 1.0), ("b", 0.0), ("c", 0.5), ("d", math.nan)])
    assert c.rate("a") == 1.0 and c.retired == {}  # one visit: not yet
    assert c.rate("d") is None  # nothing scorable is not a visit
    c.observe([("a", 0.75), ("b", 0.0), ("c", 1.0)])
    # a: 0.5 * 1 + 0.5 * 0.75 = 0.875 < 0.9; b: 0 <= 0.1; c: 0.75
    assert c.rate("a") == 0.875 and c.rate("c") == 0.75
    assert c.retired == {"b": "unsolved"}
    c.observe([("a", 1.0), ("b", 1.0)])  # a: 0.9375 >= 0.9; a retired prompt's visits change nothing
    assert c.retired == {"b": "unsolved", "a": "solved"} and c.rate("b") == 0.0
    assert c.active(["a", "b", "c", "e"]) == [2, 3]


def test_state_round_trips():
    c = PromptCurriculum(min_visits=1)
    c.observe([("a", 1.0), ("b", 0.5)])
    d = PromptCurriculum(min_visits=1)
    d.load_state_dict(c.state_dict())
    assert d.retired == c.retired == {"a": "solved"} and d.rate("b") == 0.5


@pytest.mark.parametrize(("options", "message"), [
    ({"retire_above": None}, "set retire_above"),
    ({"retire_below": 0.96}, "retire_below=0.96 must be < retire_above=0.95"),
    ({"min_visits": 0}, "min_visits=0 must be >= 1"),
    ({"smoothing": 0.0}, r"smoothing=0.0 must be in \(0, 1\]"),
])
def test_bad_options_name_themselves(options, message):
    with pytest.raises(ValueError, match=message):
        PromptCurriculum(**options)


class EvenSolved(RewardFunction):
    """Every completion of a prompt with an even reference scores 1; the others 0 or 1 by the completion."""

    def __call__(self, completions, references, **columns):
        return RewardOutput(torch.tensor([1.0 if int(r) % 2 == 0 else float(len(c) % 2)
                                          for c, r in zip(completions, references, strict=True)]))


def _run(model, tmp_path, steps, resume=None, callbacks=()):
    L.seed_everything(0)
    module = tiny_module(model, reward=EvenSolved(),
                         curriculum=PromptCurriculum(retire_above=1.0, min_visits=1))
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, save_top_k=0,
                                                     every_n_train_steps=1)
    trainer = tiny_trainer(tmp_path, max_steps=steps, enable_checkpointing=True, callbacks=[checkpoint, *callbacks])
    source = SyntheticArithmetic(num_train=16, num_val=4, num_test=4, max_operand=20, seed=0)
    trainer.fit(module, datamodule=PromptDataModule(source, prompts_per_step=4), ckpt_path=resume)
    return module, trainer


def test_solved_prompts_are_retired_and_skipped(tmp_path, sft_model_path):
    record = Record()
    module, trainer = _run(sft_model_path, tmp_path, 5, callbacks=[record])
    retired = module.curriculum.retired
    seen = [pid for stats in record.outputs for pid in stats.batch.ids]
    assert retired and all(reason == "solved" for reason in retired.values())
    for step, stats in enumerate(record.outputs):  # a prompt retired at a step is never trained on after it
        earlier = {pid for s in record.outputs[:step] for pid, r in zip(s.batch.ids, s.rewards, strict=True) if torch.all(r == 1)}
        assert not earlier & set(stats.batch.ids)
        assert 1 <= len(stats.batch) <= 4
    assert any(stats.num_drawn > 4 for stats in record.outputs)  # retired prompts skipped, then topped up
    assert len(set(seen)) > 4
    metrics = trainer.callback_metrics
    assert metrics["rollout/retired_prompts"].item() == len(retired)
    assert metrics["rollout/skipped_prompts"].item() >= 0


def test_a_resumed_run_retires_what_the_uninterrupted_one_does(tmp_path, sft_model_path):
    whole, _ = _run(sft_model_path, tmp_path / "whole", 5)
    _run(sft_model_path, tmp_path / "parts", 3)
    resumed, trainer = _run(sft_model_path, tmp_path / "parts", 5,
                            resume=str(tmp_path / "parts" / "ckpt" / "last.ckpt"))
    assert trainer.global_step == 5
    assert resumed.curriculum.state_dict() == whole.curriculum.state_dict()
    for (k, a), b in zip(whole.policy.state_dict().items(), resumed.policy.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
