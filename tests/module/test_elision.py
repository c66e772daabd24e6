"""Zero-advantage elision: completions whose advantage is exactly 0 leave the forward and backward when the loss
says they add nothing, and the update is the one without elision (the loss's divisors still count them)."""

from collections.abc import Callable

import lightning as L
import pytest
import torch

from lit_grpo import RewardFunction
from lit_grpo.losses import CISPO, GMPO, GSPO, SAPO, PPOClip, TruncatedIS
from lit_grpo.types import RewardOutput
from tests.helpers import tiny_data, tiny_module, tiny_trainer
from tests.recording import MemoryLogger, Record
from tests.scale.train_tiny import ScriptedEngine, SkewedReward

STEPS = 3


class ConstantAt(SkewedReward):
    """The skewed digit reward, but every completion scores 1 on the ``calls``-th call (a batch of zeros)."""

    def __init__(self, calls: int) -> None:
        self.calls, self.seen = calls, 0

    def __call__(self, completions, references, **columns) -> RewardOutput:
        self.seen += 1
        out = super().__call__(completions, references, **columns)
        return RewardOutput(torch.ones_like(out.scores)) if self.seen == self.calls else out


def _fit(tmp_path, model, elide: bool, reward: Callable[[], RewardFunction] = SkewedReward, **options):
    """``STEPS`` optimizer steps on scripted rollouts (the same whatever the weights) with a reward whose groups
    are often constant and sometimes hold a completion at the group mean: many advantages are exactly 0."""
    L.seed_everything(0)
    module = tiny_module(model, reward=reward(), engine=ScriptedEngine(),
                         elide_zero_advantage=elide, **options)
    record, log = Record(), MemoryLogger()
    trainer = tiny_trainer(tmp_path / str(elide), max_steps=STEPS, callbacks=[record], logger=log,
                           log_every_n_steps=1)
    trainer.fit(module, datamodule=tiny_data())
    return module, record, [row for _, row in log.rows if "perf/elided_frac" in row]


def _assert_same_update(tmp_path, model, reward=SkewedReward, **options) -> list[dict]:
    """The first optimizer step's gradient within 1e-5 of its norm (only the float summation order differs:
    observed ~1e-6), every later step's within 1e-4 (the weights it is taken at differ a little), and the
    weights' change over ``STEPS`` steps within 1e-3 of its norm, no element off by half a step at lr 1e-3.
    The weights cannot be held elementwise to the gradients' tolerance: Adam divides a gradient near 0 (~1e-9
    here) by its own size, so the last bits of such a gradient move its weight by a fraction of a step
    (observed up to ~1e-4 in one element of 8192). The gradients are what elision must not change."""
    elided, record, rows = _fit(tmp_path, model, True, reward, **options)
    plain, reference, plain_rows = _fit(tmp_path, model, False, reward, **options)
    assert sum(row["perf/elided_frac"] for row in rows) > 0, "nothing was elided: the test is vacuous"
    assert all(row["perf/elided_frac"] == 0 for row in plain_rows)
    assert len(record.steps) == len(reference.steps) == STEPS
    for k, ((_, ours), (_, theirs)) in enumerate(zip(record.steps, reference.steps, strict=True)):
        assert _relative(ours, theirs) < (1e-5 if k == 0 else 1e-4)
    ours, theirs = elided.policy.state_dict(), plain.policy.state_dict()
    assert any(not torch.equal(v, record.initial[k]) for k, v in theirs.items()), "the policy did not train"
    assert _relative({k: ours[k] - record.initial[k] for k in theirs},
                     {k: v - record.initial[k] for k, v in theirs.items()}) < 1e-3
    for k, v in theirs.items():
        torch.testing.assert_close(ours[k], v, atol=5e-4, rtol=0)
    return rows


def _norm(tensors: dict) -> float:
    return float(torch.sqrt(sum(t.double().square().sum() for t in tensors.values())))


def _relative(ours: dict, theirs: dict) -> float:
    """``|ours - theirs| / |theirs|`` over all the tensors together (``|ours|`` when ``theirs`` are all 0)."""
    return _norm({k: ours[k] - v for k, v in theirs.items()}) / (_norm(theirs) or 1.0)


@pytest.mark.parametrize(
    "options",
    [
        {"aggregation": "token-mean"},
        {"aggregation": "seq-mean-token-mean"},
        {"aggregation": "seq-mean-token-sum"},
        {"aggregation": "seq-sum-constant"},
        {"micro_batch_size": 3},
        {"num_iterations": 2, "steps_per_generation": 2},
        {"num_iterations": 2, "steps_per_generation": 2, "micro_batch_size": 3, "aggregation": "seq-mean-token-mean",
         "weight_decay": 0.1},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_the_update_is_the_one_without_elision(tmp_path, sft_model_path, options):
    _assert_same_update(tmp_path, sft_model_path, **options)


@pytest.mark.parametrize("loss", [GSPO(), CISPO(), SAPO(), GMPO(),
                                  PPOClip(dual_clip=3.0, correction=TruncatedIS("token"))],
                         ids=lambda loss: type(loss).__name__)
def test_every_inert_loss_gives_the_same_update(tmp_path, sft_model_path, loss):
    assert loss.zero_advantage_inert
    _assert_same_update(tmp_path, sft_model_path, loss=loss, num_iterations=2, micro_batch_size=5)


def test_a_batch_with_nothing_to_train_still_steps_the_optimizer(tmp_path, sft_model_path):
    # the second rollout batch scores 1 everywhere: one zero-advantage row keeps the gradients (zeros), so Adam's
    # moments and the weight decay move the weights as they do without elision
    rows = _assert_same_update(tmp_path, sft_model_path, reward=lambda: ConstantAt(2), weight_decay=0.1)
    assert rows[1]["perf/elided_frac"] == pytest.approx(15 / 16)


def test_elided_frac_is_the_share_of_zero_advantage_rows(tmp_path, sft_model_path):
    _, record, rows = _fit(tmp_path, sft_model_path, True, steps_per_generation=2)
    for stats, row in zip(record.outputs, rows, strict=True):
        zero = (stats.advantages == 0).reshape(2, -1)  # [mini-batches, rows]: 2 prompts of 4 completions each
        kept_one = zero.all(-1).sum()  # a mini-batch of zeros trains one of them
        assert 0 < zero.sum() < zero.numel()
        assert row["perf/elided_frac"] == pytest.approx(float(zero.sum() - kept_one) / zero.numel())


@pytest.mark.parametrize("options", [{"loss": PPOClip(beta=0.05)}, {"entropy_coef": 0.01}],
                         ids=["beta", "entropy_coef"])
def test_nothing_is_elided_when_every_row_counts(tmp_path, sft_model_path, options):
    module, record, rows = _fit(tmp_path, sft_model_path, True, **options)
    assert any((stats.advantages == 0).any() for stats in record.outputs)
    assert not module._elides() and all(row["perf/elided_frac"] == 0 for row in rows)


def test_losses_say_whether_a_zero_advantage_row_is_inert():
    assert PPOClip().zero_advantage_inert and not PPOClip(beta=0.01).zero_advantage_inert
    assert all(loss.zero_advantage_inert for loss in (GSPO(), CISPO(), SAPO(), GMPO()))
