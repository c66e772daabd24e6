"""Every diagnostic callback inside one real few-step fit; the TensorBoard file holds the documented tags."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from lightning.pytorch.loggers import CSVLogger

from lit_grpo import GRPO, ExactMatch, MaxRL, Sign
from lit_grpo.callbacks import (
    AdvantageStats,
    CompletionSamples,
    DegeneracyMonitor,
    GradientBudget,
    GradientProbe,
    GradientRank,
    PassAtK,
    WeightCurve,
)
from lit_grpo.lab.registry import MetricPattern, declared_metrics
from tests.callbacks.events import read_events


def test_all_callbacks_write_their_documented_tags(fit_run):
    run = fit_run(
        [
            DegeneracyMonitor(),
            PassAtK(n=4, max_prompts=4),
            GradientRank(
                every_n_steps=2, probe=GradientProbe(params=[r"layers\.2\.mlp"]), weight_params=[r"layers\.1\.mlp\.up_proj"]
            ),
            GradientBudget(estimate="resample", num_samples=4, figure_every_n_steps=1),
            AdvantageStats(histogram_every_n_steps=1, figure_every_n_steps=1),
            CompletionSamples(every_n_steps=2),
            WeightCurve(compare=[Sign(), MaxRL()]),
        ],
        max_steps=3,
        val_check_interval=2,
    )
    ev = read_events(run.log_dir)
    scalars = set(ev.Tags()["scalars"])
    bins = ("0.0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0")
    expected = {
        "rollout/degenerate_frac",
        "rollout/all_correct_frac",
        "rollout/all_wrong_frac",
        "rollout/pooled_success_rate",
        "rollout/degenerate_iid_pred",
        "rollout/degenerate_excess",
        "rollout/ema_coverage",
        "rollout/starved_frac",
        "val/pass@1",
        "val/pass@2",
        "val/pass@4",
        "grad/erank",
        "grad/stable_rank",
        "grad/energy_rank_0.9",
        "grad/energy_rank_0.99",
        "grad/sigma_1",
        "grad/sigma_5",
        "grad/rows",
        "grad/skipped_zero",
        "grad/dedup_erank",
        "grad/dedup_rows",
        "grad/distinct_mean",
        "grad/distinct_min",
        "grad/weight_erank/model.layers.1.mlp.up_proj.weight",
        "budget/unbinned_frac",
        *(f"budget/share_{b}" for b in bins),
        *(f"budget/prompt_share_{b}" for b in bins),
        "adv/mass_mean",
        "adv/pos_share",
        "adv/nonzero_steps",
        "adv/steps",
        "adv/neg_share",
        "adv/abs_mean",
    }
    assert expected <= scalars, expected - scalars
    assert any(t.startswith("adv/mass_k") for t in scalars)
    # what the module and the callbacks declare is what they wrote: no scalar undeclared (Lightning's own
    # aside), and every declared name written but those of options this run leaves off
    writers = [type(run.module), *(type(cb) for cb in run.trainer.callbacks)]
    declared = [MetricPattern(m, cls.__name__) for cls in writers for m in declared_metrics(cls)]
    undeclared = {t for t in scalars - {"epoch", "hp_metric"} if not any(p.matches(t) for p in declared)}
    assert not undeclared, undeclared
    off = {  # resampling, per-layer ranks, the exact budget, a curriculum, several optimizer steps per batch,
        # a prompt drawn twice (the moving-average prediction), episodes (tests/envs/test_episode_training.py), ...
        "rollout/degenerate_ema_pred", "rollout/degenerate_ema_excess",
        "rollout/degenerate_resample_pred", "rollout/degenerate_resample_excess", "rollout/resample_success_rate",
        "rollout/degenerate_resample_pooled_pred", "rollout/resample_prompts", "grad/layer_erank/<layer name>",
        "budget/exact_share_<bin>", "rollout/retired_prompts", "rollout/skipped_prompts", "optim/<name>",
        "test/accuracy", "reward/timeouts", "perf/elided_frac", "data/skipped_rows", "env/turns_mean",
        "env/tool_calls_mean", "env/truncated_frac", "env/unanswered_frac", "env/seconds", "env/tool_errors",
        "env/tool_timeouts", "env/observations_cut", "env/context_exhausted_frac", "env/adv_share_turn<k>",
        "env/adv_share_final_turn",
        "async/<name>",  # an asynchronous engine (tests/rollout/test_async_rollouts.py)
    }  # fmt: skip
    unwritten = {p.pattern for p in declared if p.pattern not in off and not any(p.matches(t) for t in scalars)}
    assert not unwritten, unwritten
    # pass@k at the start (step 0) and at the validation after step 2, monotone in k
    val_steps = [e.step for e in ev.Scalars("val/accuracy")]
    assert [e.step for e in ev.Scalars("val/pass@1")] == [0, *val_steps] and len(val_steps) == 1
    for step in range(2):
        curve = [ev.Scalars(f"val/pass@{k}")[step].value for k in (1, 2, 4)]
        assert curve == sorted(curve)
    assert [e.step for e in ev.Scalars("grad/rows")] == [0, 2]  # every 2 steps from step 0
    assert {e.step for e in ev.Scalars("grad/erank")} <= {0, 2}  # a fully degenerate step has none
    images = set(ev.Tags()["images"])
    assert {"val/pass_at_k_curve", "budget/shares", "adv/mass_by_k", "estimator/weight_curve"} <= images
    assert "adv/advantages" in ev.Tags()["histograms"]
    texts = set(ev.Tags()["tensors"])
    assert {"samples/completions/text_summary", "estimator/weight_curve_table/text_summary"} <= texts
    sample = ev.Tensors("samples/completions/text_summary")[0].tensor_proto.string_val[0].decode()
    assert (
        "| # | completion | reward | advantage | tokens | truncated |" in sample and "(reference `" in sample
    )
    assert (Path(run.log_dir) / "weight_curve.png").is_file()


CALLBACKS = [
    DegeneracyMonitor,
    PassAtK,
    GradientRank,
    GradientBudget,
    AdvantageStats,
    CompletionSamples,
    WeightCurve,
]


def _module():
    return SimpleNamespace(
        estimator=GRPO(),
        group_size=4,
        reward=ExactMatch(),
        engine=object(),
        score=None,
        sampling=None,
        policy=None,
    )


@pytest.mark.parametrize("cls", CALLBACKS, ids=lambda c: c.__name__)
def test_setup_without_a_logger_names_the_callback_and_the_fix(cls):
    trainer = SimpleNamespace(
        loggers=[], datamodule=SimpleNamespace(val_dataloader=lambda: [1]), limit_val_batches=1
    )
    with pytest.raises(ValueError, match=f"{cls.__name__} .*no logger.*TensorBoardLogger"):
        cls().setup(trainer, _module(), "fit")


@pytest.mark.parametrize(
    "cls", [WeightCurve, GradientBudget, AdvantageStats], ids=lambda c: c.__name__
)
def test_text_and_figures_need_a_tensorboard_logger(cls, tmp_path):
    trainer = SimpleNamespace(loggers=[CSVLogger(tmp_path)], datamodule=None)
    with pytest.raises(ValueError, match=f"{cls.__name__} writes TensorBoard text and figures.*CSVLogger"):
        cls().setup(trainer, _module(), "fit")


@pytest.mark.parametrize(
    "cls", [DegeneracyMonitor, AdvantageStats, WeightCurve, GradientBudget], ids=lambda c: c.__name__
)
def test_setup_refuses_a_module_that_is_not_a_grpo_module(cls):
    trainer = SimpleNamespace(loggers=[object()])
    with pytest.raises(TypeError, match=f"{cls.__name__} needs a lit_grpo GRPOModule"):
        cls().setup(trainer, SimpleNamespace(), "fit")
