"""GradientBudget's exact budget: each prompt's gradient-contribution norm, against one backward per group."""

import pytest
import torch

from lit_grpo.callbacks import GradientBudget, GradientProbe
from lit_grpo.diagnostics.gradients import group_gradient_norms, select_linear_targets, take_rows
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import SamplingParams
from tests.callbacks.events import read_events


@pytest.fixture(scope="module")
def policy_and_rollouts(sft_model_path):
    policy = load_policy(sft_model_path)
    engine = HFGenerateEngine()
    engine.bind(policy, load_tokenizer(sft_model_path))
    torch.manual_seed(0)
    rollouts = engine.generate(["12+7=", "3+45=", "9+9="], 4, SamplingParams(max_new_tokens=5))
    return policy, rollouts


def test_group_norms_equal_one_backward_per_group(policy_and_rollouts):
    policy, rollouts = policy_and_rollouts
    targets, _ = select_linear_targets(policy, [r"layers\.2\.mlp\.up_proj", r"layers\.1\.self_attn\.q_proj"])
    params = [p for t in targets for p in ([t.module.weight] if t.weight else []) + ([t.module.bias] if t.bias else [])]
    coef = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, -1.0, -1.0])  # group 2 degenerate
    want = []
    for g in range(3):
        rows = list(range(4 * g, 4 * g + 4))
        part = take_rows(rollouts, rows)
        logp, _ = sequence_logprobs(policy, part)
        objective = (logp * part.completion_mask * coef[rows][:, None]).sum()
        grads = torch.autograd.grad(objective, params, allow_unused=True)
        want.append(torch.sqrt(sum((gr.double() ** 2).sum() for gr in grads if gr is not None)).item())
    got = group_gradient_norms(policy, rollouts, coef, 4, targets)
    assert got.tolist() == pytest.approx(want, rel=1e-4, abs=1e-7)
    assert got[1] == 0.0  # zero advantages: nothing computed, no contribution
    assert group_gradient_norms(policy, rollouts, coef, 4, targets, micro_batch_size=3).tolist() == pytest.approx(
        want, rel=1e-4, abs=1e-7
    )
    with pytest.raises(ValueError, match="whole groups"):
        group_gradient_norms(policy, rollouts, coef[:10], 4, targets)


def test_options_are_checked():
    with pytest.raises(ValueError, match="set exact: true"):
        GradientBudget(probe=GradientProbe(params=["mlp"]))
    with pytest.raises(ValueError, match="whole rows; leave probe.projection_dim null"):
        GradientBudget(exact=True, probe=GradientProbe(projection_dim=8))


def _params(module):
    return [p.detach().clone() for p in module.policy.parameters()]


def test_exact_budget_is_logged_and_leaves_training_unchanged(fit_run):
    plain = fit_run([GradientBudget(estimate="ema", figure_every_n_steps=0)], max_steps=3, name="plain")
    exact = fit_run(
        [GradientBudget(estimate="resample", num_samples=4, exact=True, probe=GradientProbe(params=[r"layers\.2\."]),
                        figure_every_n_steps=1)],
        max_steps=3,
        name="exact",
    )
    for a, b in zip(_params(plain.module), _params(exact.module), strict=True):
        assert torch.equal(a, b)
    ev = read_events(exact.log_dir)
    bins = ("0.0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0")
    scalars = set(ev.Tags()["scalars"])
    assert {f"budget/exact_share_{b}" for b in bins} <= scalars
    for step in {e.step for e in ev.Scalars("budget/exact_share_0.0-0.2")}:
        total = sum(next(e.value for e in ev.Scalars(f"budget/exact_share_{b}") if e.step == step) for b in bins)
        assert total == pytest.approx(1.0, abs=1e-5)
    assert "budget/shares" in ev.Tags()["images"]
