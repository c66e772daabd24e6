import math

import pytest
import torch

from lit_grpo.logprobs import kl_estimate, token_entropy, token_logprobs
from lit_grpo.losses import LossInputs, LossOutput, PPOClip, TruncatedIS
from lit_grpo.losses.functional import AGGREGATIONS, clipped_policy_loss, token_weights, truncated_is_weights
from lit_grpo.step_metrics import StepStats


def _batch(seed=0, n=6, t=5):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(n, t, dtype=torch.bool)
    lengths = torch.tensor([5, 3, 1, 4, 2, 5])[:n]
    mask = torch.arange(t)[None, :] < lengths[:, None]
    return torch.randn(n, t, generator=g), mask


def test_clipped_loss_is_minus_advantage_on_policy():
    logp, _ = _batch()
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0, -1.0])
    loss, clipped = clipped_policy_loss(logp, logp.detach(), adv)
    torch.testing.assert_close(loss, -adv[:, None].expand_as(loss))
    assert not clipped.any()


def test_clipped_loss_clips_each_side():
    old = torch.zeros(4, 1)
    logp = torch.log(torch.tensor([[1.5], [1.5], [0.5], [0.5]]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = clipped_policy_loss(logp, old, adv, eps_low=0.2, eps_high=0.28)
    # A>0, ratio 1.5 -> clipped at 1.28; A<0, ratio 1.5 -> unclipped -1.5*(-1); A>0 ratio .5 -> unclipped .5;
    # A<0 ratio .5 -> clipped at 0.8
    torch.testing.assert_close(loss.squeeze(-1), torch.tensor([-1.28, 1.5, -0.5, 0.8]))
    assert clipped.squeeze(-1).tolist() == [True, False, False, True]


def test_a_zero_advantage_token_is_never_clipped():
    """What makes train/clip_frac over the trained tokens never smaller than over every token (docs/methods.md):
    the rows that elision leaves out (A = 0) are never clipped, whatever their ratio."""
    old = torch.zeros(3, 2)
    logp = torch.log(torch.tensor([[10.0, 0.01], [1.5, 0.5], [1.0, 1.0]]))
    _, clipped = clipped_policy_loss(logp, old, torch.zeros(3), eps_low=0.2, eps_high=0.28, dual_clip=3.0)
    assert not clipped.any()


def test_dual_clip_bounds_negative_advantages():
    old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[10.0]]))
    loss, _ = clipped_policy_loss(logp, old, torch.tensor([-1.0]), dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    loss_no_dual, _ = clipped_policy_loss(logp, old, torch.tensor([-1.0]))
    assert loss_no_dual.item() == pytest.approx(10.0)


def _reference_loss(token_loss, mask, mode, max_new):
    m = mask.float()
    if mode == "token-mean":
        return (token_loss * m).sum() / m.sum()
    if mode == "seq-mean-token-mean":
        return ((token_loss * m).sum(-1) / m.sum(-1)).mean()
    if mode == "seq-mean-token-sum":
        return (token_loss * m).sum(-1).mean()
    return (token_loss * m).sum() / (mask.shape[0] * max_new)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_token_weights_reproduce_each_aggregation(mode):
    token_loss, mask = _batch()
    w = token_weights(mask, mode, max_new_tokens=8)
    torch.testing.assert_close((token_loss * w).sum(), _reference_loss(token_loss, mask, mode, 8))


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_micro_batches_accumulate_to_the_full_batch_gradient(mode):
    torch.manual_seed(0)
    x, mask = _batch(seed=1)
    param = torch.nn.Parameter(torch.randn(5))
    adv = torch.randn(6)

    def token_loss(rows):
        logp = torch.log_softmax(x[rows] * param, dim=-1)  # [n, T]
        return clipped_policy_loss(logp, logp.detach() + 0.1, adv[rows])[0]

    w = token_weights(mask, mode, max_new_tokens=7)
    full = (token_loss(slice(0, 6)) * w).sum()
    (g_full,) = torch.autograd.grad(full, param)
    g_acc = torch.zeros_like(param)
    for start in range(0, 6, 4):
        rows = slice(start, start + 4)
        (g,) = torch.autograd.grad((token_loss(rows) * w[rows]).sum(), param)
        g_acc += g
    torch.testing.assert_close(g_acc, g_full)


def test_seq_sum_constant_does_not_depend_on_lengths():
    _, mask = _batch()
    w = token_weights(mask, "seq-sum-constant", max_new_tokens=10)
    assert torch.all(w[mask] == 1 / (6 * 10))


def test_global_counts_override_local_ones():
    _, mask = _batch()
    w = token_weights(mask, "token-mean", 8, num_tokens=torch.tensor(100.0))
    assert w[mask].unique().tolist() == [pytest.approx(0.01)]


def test_unknown_aggregation_names_the_choices():
    _, mask = _batch()
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        token_weights(mask, "mean", 8)


def test_kl_estimators():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    d = logp - ref
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), d)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), 0.5 * d**2)
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), torch.exp(-d) + d - 1)
    assert torch.all(kl_estimate(logp, ref, "k3") >= 0)
    assert torch.equal(kl_estimate(logp, logp, "k3"), torch.zeros_like(logp))
    with pytest.raises(ValueError, match="k3"):
        kl_estimate(logp, ref, "k4")


def test_token_logprobs_matches_log_softmax_in_chunks():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=g)
    ids = torch.randint(0, 11, (3, 7), generator=g)
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, ids, 0.7, chunk_size=4), expected)
    ent = token_entropy(logits, 1.0, chunk_size=5)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(ent, -(p * p.log()).sum(-1))
    assert ent.max() <= math.log(11) + 1e-5


def _inputs(seed=0, **overrides):
    logp, mask = _batch(seed)
    g = torch.Generator().manual_seed(seed + 1)
    fields = {
        "logp": logp * mask,
        "old_logp": (logp + 0.3 * torch.randn(logp.shape, generator=g)) * mask,
        "engine_logp": (logp - 0.5 * torch.rand(logp.shape, generator=g)) * mask,
        "ref_logp": (logp + 0.2 * torch.randn(logp.shape, generator=g)) * mask,
        "advantages": torch.randn(logp.shape[0], generator=g),
        "mask": mask,
        "weights": token_weights(mask, "token-mean", 8),
    }
    return LossInputs(**{**fields, **overrides})


def test_ppo_clip_defaults_are_the_clipped_surrogate():
    batch = _inputs()
    out = PPOClip()(batch)
    expected, clipped = clipped_policy_loss(batch.logp, batch.old_logp, batch.advantages, 0.2, 0.2, None)
    torch.testing.assert_close(out.loss, expected)
    assert torch.equal(out.means["clip_frac"], clipped.float()) and not out.terms
    loss = PPOClip()
    assert loss.needs_old_logp and not loss.needs_ref_logp and not loss.needs_engine_logp


def test_ppo_clip_composes_dual_clip_correction_and_kl():
    batch = _inputs(seed=3)
    loss = PPOClip(eps_low=0.1, eps_high=0.28, dual_clip=3.0, beta=0.05, kl_estimator="k2",
                   correction=TruncatedIS("sequence", 1.5))
    out = loss(batch)
    surrogate, _ = clipped_policy_loss(batch.logp, batch.old_logp, batch.advantages, 0.1, 0.28, 3.0)
    is_weights = truncated_is_weights(batch.old_logp, batch.engine_logp, batch.mask, "sequence", 1.5)
    kl = kl_estimate(batch.logp, batch.ref_logp, "k2")
    torch.testing.assert_close(out.loss, surrogate * is_weights + 0.05 * kl)
    torch.testing.assert_close(out.terms["kl"], kl)
    assert loss.needs_ref_logp and loss.needs_engine_logp


@pytest.mark.parametrize(("options", "message"), [
    ({"eps_low": 1.0}, "eps_low=1.0"),
    ({"dual_clip": 1.0}, "dual_clip=1.0 must be > 1"),
    ({"beta": -0.1}, "beta=-0.1 must be >= 0"),
    ({"kl_estimator": "k4"}, "kl_estimator='k4' is not known; choose one of k1, k2, k3"),
    ({"tis": "token"}, "correction: TruncatedIS"),
])
def test_ppo_clip_rejects_bad_options_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        PPOClip(**options)


def test_loss_statistics_are_means_over_tokens_or_completions():
    batch = _inputs()
    mask = batch.mask.float()
    stats = StepStats()
    stats.add(torch.tensor(1.0), LossOutput(batch.logp, means={"tok": mask * 2, "seq": torch.arange(6.0)}), batch)
    assert stats.means["tok"] == (2 * mask.sum().item(), mask.sum().item())  # padding left out
    assert stats.means["seq"] == (15.0, 6.0)
    with pytest.raises(ValueError, match=r"'bad' has shape \(6, 1\); a mean is \[n, T\]"):
        stats.add(torch.tensor(1.0), LossOutput(batch.logp, means={"bad": torch.ones(6, 1)}), batch)
