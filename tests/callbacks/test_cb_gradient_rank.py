"""GradientRank: exact per-completion rows, spectra with known answers, the rank-2 span, no effect on training."""

import math
from types import SimpleNamespace

import pytest
import torch

from lit_grpo import GRPO, AdvantageEstimator
from lit_grpo.callbacks import GradientBudget, GradientFidelity, GradientProbe, GradientRank, ShadowEstimators
from lit_grpo.diagnostics.gradients import (
    centroid_span_residual,
    per_completion_gradients,
    project_rows,
    rows_spectrum_summary,
    select_linear_targets,
    singular_values,
    take_rows,
)
from lit_grpo.diagnostics.rank import spectrum_summary
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


def _loop_rows(policy, rollouts, coef, targets):
    """Row i by its own forward and autograd.grad over the targets' parameters."""
    params = [
        p
        for t in targets
        for p in ([t.module.weight] if t.weight else []) + ([t.module.bias] if t.bias else [])
    ]
    rows = []
    for i in range(len(rollouts)):
        one = take_rows(rollouts, [i])
        logp, _ = sequence_logprobs(policy, one)
        grads = torch.autograd.grad(coef[i] * (logp * one.completion_mask).sum(), params)
        rows.append(torch.cat([g.flatten() for g in grads]))
    return torch.stack(rows)


def test_rows_equal_each_completions_own_gradient(policy_and_rollouts):
    policy, rollouts = policy_and_rollouts
    targets, _ = select_linear_targets(policy, [r"layers\.2\.mlp\.up_proj", r"layers\.1\.self_attn\.q_proj"])
    assert [(t.name, t.weight, t.bias) for t in targets] == [
        ("model.layers.1.self_attn.q_proj", True, True),
        ("model.layers.2.mlp.up_proj", True, False),
    ]
    coef = torch.linspace(-1, 1.5, len(rollouts))
    rows = torch.cat(per_completion_gradients(policy, rollouts, coef, targets), dim=1)
    expected = _loop_rows(policy, rollouts, coef, targets)
    assert rows.shape == expected.shape == (12, sum(t.numel for t in targets))
    torch.testing.assert_close(rows, expected, atol=1e-5 * expected.abs().max().item(), rtol=1e-4)
    assert all(p.grad is None for p in policy.parameters())  # .grad is never touched


def test_default_selection_skips_weights_tied_to_the_embedding(policy_and_rollouts):
    policy, _ = policy_and_rollouts
    targets, _ = select_linear_targets(policy)
    names = {t.name for t in targets}
    assert "lm_head" not in names  # tied to embed_tokens in the tiny model
    assert len(names) == 3 * 7  # q, k, v, o, gate, up, down of each of the 3 layers
    _, left_out = select_linear_targets(policy, ["embed_tokens", "norm"])
    assert "model.embed_tokens.weight" in left_out


def test_group_update_lies_in_the_span_of_the_class_centroids(policy_and_rollouts):
    policy, rollouts = policy_and_rollouts
    group = take_rows(rollouts, [0, 1, 2, 3])
    targets, _ = select_linear_targets(policy, [r"layers\.2\."])
    correct = torch.tensor([True, False, True, False])
    adv = GRPO()(correct.float().unsqueeze(0))[0]  # one advantage per class
    rows = torch.cat(per_completion_gradients(policy, group, torch.ones(4), targets), dim=1)  # grad log pi
    update = torch.cat(per_completion_gradients(policy, group, adv, targets), dim=1).sum(0)
    torch.testing.assert_close(update, (adv[:, None] * rows).sum(0), atol=1e-5, rtol=1e-4)
    assert centroid_span_residual(rows, correct, update) < 1e-5
    # coefficients that differ within a class leave the span: the check can fail
    mixed = (torch.tensor([1.0, 0.2, -0.7, 0.3])[:, None] * rows).sum(0)
    assert centroid_span_residual(rows, correct, mixed) > 1e-3


def _matrix(singular_values, n=6, d=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(d, n, generator=gen, dtype=torch.float64))
    s = torch.zeros(n, dtype=torch.float64)
    s[: len(singular_values)] = torch.tensor(singular_values, dtype=torch.float64)
    return u @ torch.diag(s) @ v.T  # [n, d] with exactly these singular values


@pytest.mark.parametrize("sigma", [[3.0, 3.0], [5.0, 1.0, 1.0, 0.5], [1.0] * 6, [2.0]])
def test_spectrum_matches_known_singular_values(sigma):
    m = _matrix(sigma)
    got = rows_spectrum_summary(m.float())
    p = torch.tensor(sigma) / sum(sigma)
    assert got["erank"] == pytest.approx(math.exp(-(p * p.log()).sum().item()), rel=1e-5)
    assert got["stable_rank"] == pytest.approx(sum(s * s for s in sigma) / max(sigma) ** 2, rel=1e-5)
    want = spectrum_summary(m)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    if sigma == [3.0, 3.0]:
        assert got["erank"] == pytest.approx(2.0, rel=1e-5)  # float32 entries


def test_a_wide_rank_two_float32_matrix_has_effective_rank_two():
    # square roots of float32 Gram eigenvalues would give noise singular values ~1e-4 of the largest
    # and an effective rank near 2.1; the two-pass computation keeps them ~1e-7
    gen = torch.Generator().manual_seed(0)
    m = (torch.randn(64, 2, generator=gen) @ torch.randn(2, 50000, generator=gen)).float()
    sigma = singular_values(m, chunk_size=8192)
    assert (sigma[2:] / sigma[0]).max() < 1e-5
    exact = spectrum_summary(m.double())
    assert rows_spectrum_summary(m)["erank"] == pytest.approx(exact["erank"], abs=1e-4)
    assert exact["erank"] < 2.0 + 1e-9


def test_all_zero_or_non_finite_matrix_has_no_spectrum():
    assert rows_spectrum_summary(torch.zeros(4, 10)) is None
    assert rows_spectrum_summary(torch.tensor([[1.0, float("nan")], [0.0, 1.0]])) is None


def test_projection_is_fixed_by_the_seed_and_keeps_norms():
    gen = torch.Generator().manual_seed(1)
    rows = torch.randn(3, 5000, generator=gen)
    a = project_rows(rows, 2000, seed=7, chunk_size=1024)
    assert torch.equal(a, project_rows(rows, 2000, seed=7, chunk_size=1024))
    assert not torch.equal(a, project_rows(rows, 2000, seed=8, chunk_size=1024))
    assert not torch.equal(a, project_rows(rows, 2000, seed=7, stream=1, chunk_size=1024))
    ratio = a.square().sum(1) / rows.square().sum(1)
    assert ratio.tolist() == pytest.approx([1.0] * 3, abs=0.1)


def test_options_and_selection_errors_name_the_callback():
    with pytest.raises(ValueError, match="GradientRank: every_n_steps=0"):
        GradientRank(every_n_steps=0)
    with pytest.raises(ValueError, match="not a regular expression"):
        GradientRank(weight_params=["("])


def test_probe_options_are_checked_where_they_are_declared():
    with pytest.raises(ValueError, match=r"probe: give either lora: true or params: \['x'\], not both"):
        GradientProbe(lora=True, params=["x"])
    with pytest.raises(ValueError, match="probe.projection_dim=0 must be >= 1"):
        GradientProbe(projection_dim=0)
    with pytest.raises(ValueError, match="probe.micro_batch_size=0 must be >= 1"):
        GradientProbe(micro_batch_size=0)
    with pytest.raises(ValueError, match=r"probe.params: '\(' is not a regular expression"):
        GradientProbe(params=["("])


@pytest.mark.parametrize("cls", [GradientRank, GradientBudget, ShadowEstimators, GradientFidelity])
def test_the_gradient_callbacks_take_the_probe_from_yaml(cls):
    from jsonargparse import ArgumentParser
    from lightning import Callback

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--callback", type=Callback)
    init = {"probe": {"params": ["mlp"], "micro_batch_size": 4}, "exact": True} if cls is GradientBudget else \
        {"probe": {"params": ["mlp"], "projection_dim": 32, "seed": 3}}
    if cls is ShadowEstimators:
        init["estimators"] = [{"class_path": "lit_grpo.Sign"}]
    config = parser.parse_object({"callback": {"class_path": f"{cls.__module__}.{cls.__name__}", "init_args": init}})
    probe = parser.instantiate(config).callback.probe
    assert isinstance(probe, GradientProbe) and probe.params == ["mlp"]
    assert (probe.micro_batch_size, probe.projection_dim) == ((4, None) if cls is GradientBudget else
                                                              (128 if cls is GradientFidelity else None, 32))


def test_patterns_that_choose_nothing_are_refused(policy_and_rollouts):
    policy, _ = policy_and_rollouts
    with pytest.raises(
        ValueError, match="GradientRank: probe.params=\\['nothing'\\] chooses no trainable nn.Linear"
    ):
        GradientRank(probe=GradientProbe(params=["nothing"])).on_train_start(None, SimpleNamespace(policy=policy))
    with pytest.raises(ValueError, match="GradientRank: probe.lora=True chooses no"):
        GradientRank(probe=GradientProbe(lora=True)).on_train_start(None, SimpleNamespace(policy=policy))


def _params(module):
    return {k: v.detach().clone() for k, v in module.policy.named_parameters()}


def test_training_is_unchanged_and_ranks_are_logged(fit_run):
    plain = fit_run([], name="plain")
    rank = GradientRank(
        every_n_steps=1,
        probe=GradientProbe(params=[r"layers\.2\."], projection_dim=16, micro_batch_size=5),
        weight_params=[r"layers\.0\.mlp\.down_proj"],
    )
    measured = fit_run([rank], name="measured")
    a, b = _params(plain.module), _params(measured.module)
    assert all(torch.equal(a[k], b[k]) for k in a)
    ev_plain, ev = read_events(plain.log_dir), read_events(measured.log_dir)
    assert [e.value for e in ev.Scalars("train/loss")] == [e.value for e in ev_plain.Scalars("train/loss")]
    tags = set(ev.Tags()["scalars"])
    expected = {
        "grad/erank",
        "grad/stable_rank",
        "grad/energy_rank_0.9",
        "grad/energy_rank_0.99",
        "grad/rows",
        "grad/skipped_zero",
        "grad/weight_skipped_zero",
        "grad/weight_erank/model.layers.0.mlp.down_proj.weight",
        *(f"grad/sigma_{j}" for j in range(1, 6)),
    }
    assert expected <= tags, expected - tags
    eranks = {e.step: e.value for e in ev.Scalars("grad/erank")}
    rows = {e.step: e.value for e in ev.Scalars("grad/rows")}
    skipped = [e.value for e in ev.Scalars("grad/skipped_zero")]
    assert sorted(rows) == [0, 1, 2] and eranks
    assert len(eranks) + skipped[-1] == 3  # a step whose advantages are all 0 is skipped and counted
    assert all(1 <= r <= min(rows[s], 16) for s, r in eranks.items())  # erank <= rank <= min(n, d')


class Zero(AdvantageEstimator):
    def __call__(self, rewards, lengths=None):
        return torch.zeros_like(rewards)


def test_an_all_zero_matrix_is_skipped_and_counted(fit_run):
    run = fit_run([GradientRank(every_n_steps=1)], max_steps=2, estimator=Zero())
    ev = read_events(run.log_dir)
    assert "grad/erank" not in ev.Tags()["scalars"]
    assert [e.value for e in ev.Scalars("grad/skipped_zero")] == [1.0, 2.0]
    assert [e.value for e in ev.Scalars("grad/rows")] == [0.0, 0.0]


def test_fsdp1_is_refused_with_the_strategies_that_measure_it(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from lightning.pytorch.strategies import FSDPStrategy

    trainer = SimpleNamespace(loggers=[TensorBoardLogger(tmp_path)], strategy=FSDPStrategy())
    module = SimpleNamespace(policy=None, sampling=None)
    with pytest.raises(ValueError, match=r"GradientRank needs whole .*FSDPStrategy \(FSDP1\).*FSDP2"):
        GradientRank().setup(trainer, module, "fit")


def test_duplicate_completions_are_counted_and_removed_in_the_dedup_rank(policy_and_rollouts):
    from lit_grpo.rollout.functional import select_rows
    from lit_grpo.types import PromptBatch, RolloutStats
    from tests.callbacks.scripted import scripted_trainer

    policy, rollouts = policy_and_rollouts
    group = select_rows(rollouts, [0, 0, 1, 2])  # one prompt whose first two completions are the same string
    texts = [group.texts[0], group.texts[0], group.texts[2], group.texts[3]]
    assert texts[2] != texts[0] and texts[3] != texts[0]
    adv = torch.tensor([[1.0, 1.0, -0.5, -1.5]])
    batch = PromptBatch(["12+7="], ["19"], ["p0"])
    stats = RolloutStats(batch, texts, torch.tensor([[1.0, 1.0, 0.0, 0.0]]), adv, group.lengths, group.truncated,
                         rollouts=group)  # fmt: skip
    trainer = scripted_trainer()
    module = SimpleNamespace(policy=policy, sampling=SamplingParams(), device=torch.device("cpu"), trainer=trainer)
    cb = GradientRank(
        every_n_steps=1, probe=GradientProbe(params=[r"layers\.2\.mlp\.up_proj", r"layers\.1\.mlp\.up_proj"]), per_layer=True
    )
    cb.on_train_start(trainer, module)
    cb.on_train_batch_start(trainer, module, batch, 0)
    cb.on_train_batch_end(trainer, module, {"rollout": stats}, batch, 0)
    logged = {k: v[-1][1] for k, v in trainer.loggers[0].metrics.items()}
    assert logged["grad/rows"] == 4 and logged["grad/dedup_rows"] == 3
    assert logged["grad/distinct_mean"] == 3 and logged["grad/distinct_min"] == 3
    blocks = per_completion_gradients(policy, group, adv.flatten(), cb.targets)
    full = torch.cat(blocks, dim=1)
    assert logged["grad/erank"] == pytest.approx(rows_spectrum_summary(full)["erank"], rel=1e-5)
    assert logged["grad/dedup_erank"] == pytest.approx(rows_spectrum_summary(full[[0, 2, 3]])["erank"], rel=1e-5)
    for target, block in zip(cb.targets, blocks, strict=True):
        want = rows_spectrum_summary(block)["erank"]
        assert logged[f"grad/layer_erank/{target.name}"] == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="per_layer"):
        GradientRank(per_layer=True, probe=GradientProbe(projection_dim=8))
