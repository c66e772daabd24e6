"""Importance corrections: truncated and masked weights at the token, sequence and geometric levels, applied
the same way by every loss."""

import math

import pytest
import torch

from lit_grpo.losses import REGISTRY, MaskedIS, PolicyLoss, PPOClip, TruncatedIS
from lit_grpo.losses.correction import apply_correction
from tests.losses.cases import DIFF, MASK, OLD, inputs

# the engine's log-probs: the trainer's pre-update ones (OLD) minus these differences on generated tokens
GAP = torch.tensor([[0.2, 1.0, 5.0], [-1.0, 5.0, 5.0], [0.1, 0.1, 0.1]])
ENGINE = (OLD - GAP) * MASK


def _weights(correction):
    return correction(OLD, ENGINE, MASK)


def test_truncated_levels_by_hand():
    token = _weights(TruncatedIS("token", cap=2.0))
    expected = torch.tensor([[math.exp(0.2), 2.0, 0.0], [math.exp(-1.0), 0.0, 0.0], [math.exp(0.1)] * 3])
    torch.testing.assert_close(token.weights, expected)
    assert token.means["is_truncated_frac"].tolist() == [[0, 1, 0], [0, 0, 0], [0, 0, 0]]
    seq = _weights(TruncatedIS("sequence", cap=2.0))  # products e^1.2 -> 2, e^-1, e^0.3
    torch.testing.assert_close(seq.weights[:, 0], torch.tensor([2.0, math.exp(-1.0), math.exp(0.3)]))
    assert seq.means["is_truncated_frac"].tolist() == [1, 0, 0]  # one flag per completion
    geo = _weights(TruncatedIS("geometric", cap=2.0))  # means e^0.6, e^-1, e^0.1 (own lengths 2, 1, 3)
    torch.testing.assert_close(geo.weights, torch.tensor([[math.exp(0.6)] * 3, [math.exp(-1.0)] * 3,
                                                          [math.exp(0.1)] * 3]) * MASK)


def test_masked_levels_by_hand():
    token = _weights(MaskedIS("token", low=0.5, high=2.0))  # e^0.2 in, e^1 out, e^-1 out, e^0.1 in
    torch.testing.assert_close(token.weights, torch.tensor([[math.exp(0.2), 0, 0], [0, 0, 0],
                                                            [math.exp(0.1)] * 3]))
    assert token.means["is_masked_frac"][MASK].tolist() == [0, 1, 1, 0, 0, 0]
    seq = _weights(MaskedIS("sequence", low=0.5, high=2.0))  # e^1.2 out, e^-1 out, e^0.3 in
    assert seq.means["is_masked_frac"].tolist() == [1, 1, 0]
    torch.testing.assert_close(seq.weights[2], torch.full((3,), math.exp(0.3)))
    assert torch.all(seq.weights[:2] == 0)
    geo = _weights(MaskedIS("geometric", low=0.5, high=2.0))  # e^0.6 in, e^-1 out, e^0.1 in
    assert geo.means["is_masked_frac"].tolist() == [0, 1, 0]


LOSSES = [cls for cls in REGISTRY.values() if issubclass(cls, PolicyLoss)]  # every registered loss


def test_every_loss_module_is_registered():
    import pkgutil

    import lit_grpo.losses as losses

    helpers = {"base", "functional", "correction"}  # the interface, the maths, the corrections
    modules = {f"lit_grpo.losses.{m.name}" for m in pkgutil.iter_modules(losses.__path__)} - {
        f"lit_grpo.losses.{h}" for h in helpers
    }
    assert modules and modules == {cls.__module__ for cls in LOSSES}
    assert {"MaskedIS", "TruncatedIS"} <= set(REGISTRY)  # the corrections are registered too


@pytest.mark.parametrize("loss_cls", LOSSES, ids=lambda c: c.__name__)
def test_every_loss_applies_the_correction_to_its_policy_term(loss_cls):
    correction = MaskedIS("geometric", low=0.5, high=2.0)
    plain, corrected = loss_cls(), loss_cls(correction=correction)
    assert corrected.needs_engine_logp and not plain.needs_engine_logp
    a, b = plain(inputs(DIFF, engine_logp=ENGINE)), corrected(inputs(DIFF, engine_logp=ENGINE))
    torch.testing.assert_close(b.loss, a.loss * _weights(correction).weights)
    assert b.means["is_masked_frac"].tolist() == [0, 1, 0]


@pytest.mark.parametrize(("options", "fix"), [
    ({"tis": "sequence", "tis_cap": 1.5}, "init_args: {level: sequence, cap: 1.5}"),
    ({"tis": "token"}, "--model.loss.correction.level=token --model.loss.correction.cap=2.0"),
    ({"tis_cap": 3.0}, "--model.loss.correction.cap=3.0"),
])
def test_ppo_clip_tis_is_gone_and_its_error_names_truncated_is(options, fix):
    with pytest.raises(ValueError, match="options were removed") as err:
        PPOClip(**options)
    assert "`correction: TruncatedIS`" in str(err.value) and fix in str(err.value)


def test_no_correction_changes_nothing():
    batch = inputs(DIFF)
    loss = torch.ones(3, 3)
    assert apply_correction(None, loss, batch) == (loss, {})


@pytest.mark.parametrize(("build", "message"), [
    (lambda: MaskedIS(low=1.0), "need 0 <= low < 1 < high"),
    (lambda: MaskedIS(high=1.0), "need 0 <= low < 1 < high"),
    (lambda: TruncatedIS(cap=0), "tis_cap=0 must be > 0"),
    (lambda: TruncatedIS(level="word"), "level='word' is not known"),
])
def test_bad_options_name_themselves(build, message):
    with pytest.raises(ValueError, match=message):
        build()
