"""Curves at matched compute: the module's generated-completion and token counters (dropped groups
included, kept across a resume), interpolation to a common x, the matched budget and its report table."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest

from lit_grpo import GRPO
from lit_grpo.lab.collect import RunRecord
from lit_grpo.lab.compute import at_budget, curve_crossing, interpolate, matched_budget, matched_section, on_x
from lit_grpo.lab.figures import curve_figure, x_band
from lit_grpo.lab.grid import Run
from lit_grpo.lab.loader import load_experiment
from lit_grpo.lab.spec import Arm, Curve, Experiment, Metric
from tests.helpers import tiny_data, tiny_module, tiny_trainer
from tests.lab.helpers import ROOT, write_experiment


def test_interpolation_and_the_matched_budget():
    assert on_x([(0, 1.0), (1, 2.0), (3, 4.0)], [(0, 10.0), (1, 20.0), (2, 30.0)]) == [(10.0, 1.0), (20.0, 2.0)]
    points = [(10.0, 0.0), (20.0, 1.0), (40.0, 3.0)]
    assert interpolate(points, 15.0) == pytest.approx(0.5)
    assert interpolate(points, 30.0) == pytest.approx(2.0)
    assert interpolate(points, 40.0) == 3.0
    assert math.isnan(interpolate(points, 41.0)) and math.isnan(interpolate(points, 5.0))  # never extrapolated
    assert matched_budget([points, [(10.0, 0.0), (25.0, 1.0)]]) == 25.0
    assert math.isnan(matched_budget([points, []]))  # a run without the counter: no matched budget
    band = x_band([points, [(10.0, 2.0), (25.0, 2.0)]])
    assert band[0][:2] == (10.0, 1.0) and band[0][4] == 2  # both runs at the start
    assert band[-1][0] == 40.0 and band[-1][4] == 1  # only the longer run reaches the end


def _record(arm: str, seed: int, x_per_step: float, values: list[float]) -> RunRecord:
    run = Run(arm, (), seed, (), Path("/nonexistent"))
    series = {"val/accuracy": list(enumerate(values)),
              "rollout/tokens_generated": [(s, x_per_step * (s + 1)) for s in range(len(values))]}  # fmt: skip
    return RunRecord(run, "done", 0, 1.0, series=series)


def _experiment(curve: Curve) -> Experiment:
    arms = (Arm("Plain"), Arm("Refill"))
    return Experiment("t", "t.yaml", "", (), arms, (0, 1, 2), (Metric("val/accuracy"),), curves=(curve,))


def test_an_arm_that_samples_twice_as_much_is_compared_where_the_other_has_sampled_as_much(tmp_path):
    curve = Curve(("val/accuracy",), x="tokens")
    # Plain generates 100 tokens a step, Refill 200: same accuracy per step, so Refill is behind per token
    records = [_record("Plain", s, 100.0, [0.1 * i + s for i in range(8)]) for s in range(3)]
    records += [_record("Refill", s, 200.0, [0.1 * i + s for i in range(4)]) for s in range(3)]
    (row,) = at_budget(_experiment(curve), curve, records)
    assert row["budget"] == 800.0  # Plain's last x; Refill got there in four steps
    for seed, value, step in row["arms"]["Plain"]:
        assert value == pytest.approx(0.7 + seed) and step == pytest.approx(7.0)
    for seed, value, step in row["arms"]["Refill"]:
        assert value == pytest.approx(0.3 + seed) and step == pytest.approx(3.0)
    lines = matched_section(_experiment(curve), curve, records)
    text = "\n".join(lines)
    assert "| default | val/accuracy | 800 | Plain | 3 | 1.7000 |" in text
    assert "| default | val/accuracy | 800 | Refill | 3 | 1.3000 |" in text
    assert "| default | val/accuracy | Plain | Refill | 3 | 0.4000 | 3 of 3 |" in text  # paired by seed
    if curve_figure(_experiment(curve), curve, records, tmp_path / "c.png") is not None:
        assert (tmp_path / "c.png").stat().st_size > 0


def test_curve_x_is_read_and_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    curves = [{"metrics": ["rollout/reward_mean"], "x": "tokens"}, {"metrics": ["rollout/reward_mean"]}]
    exp = load_experiment(write_experiment(tmp_path / "a.yaml", curves=curves))
    assert [c.x for c in exp.curves] == ["tokens", "step"]
    with pytest.raises(ValueError, match=r"curves\[0\]\.x: 'flops' is not one of \['step', 'completions', 'tokens'\]"):
        load_experiment(write_experiment(tmp_path / "b.yaml", curves=[{"metrics": ["rollout/reward_mean"], "x": "flops"}]))


class CountGenerated(L.Callback):
    """Counts what the engine generated (wrapping its generate) and what the module logged, per step."""

    def __init__(self) -> None:
        self.tokens = self.completions = 0
        self.kept_tokens = 0
        self.logged: list[tuple[float, float, float]] = []  # (completions, tokens, prompts drawn)

    def on_train_start(self, trainer, pl_module) -> None:
        generate = pl_module.engine.generate

        def counted(prompts, n, sampling):
            out = generate(prompts, n, sampling)
            self.tokens += int(out.lengths.sum())
            self.completions += len(out.lengths)
            return out

        pl_module.engine.generate = counted

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.kept_tokens += int(outputs["rollout"].lengths.sum())
        m = trainer.callback_metrics
        self.logged.append((float(m["rollout/completions_generated"]), float(m["rollout/tokens_generated"]),
                            float(m["rollout/prompts_drawn"])))  # fmt: skip
        assert self.logged[-1][:2] == (self.completions, self.tokens)


def test_the_module_counts_every_generated_completion_and_token(tmp_path, sft_model_path):
    L.seed_everything(0)
    count = CountGenerated()
    trainer = tiny_trainer(tmp_path, max_steps=3, callbacks=[count], enable_checkpointing=True,
                           default_root_dir=str(tmp_path))  # fmt: skip
    module = tiny_module(sft_model_path, estimator=GRPO(), filter_degenerate=True, max_refill_batches=2)
    trainer.fit(module, datamodule=tiny_data(prompts_per_step=4))
    drawn = sum(p for _, _, p in count.logged)
    assert count.logged[-1][0] == drawn * 4  # every drawn prompt's group of G = 4
    assert count.tokens > count.kept_tokens  # dropped groups count too (some step refilled)
    # the totals continue from a checkpoint
    ckpt = {}
    module.on_save_checkpoint(ckpt)
    resumed = tiny_module(sft_model_path, estimator=GRPO(), filter_degenerate=True)
    resumed.on_load_checkpoint(ckpt)
    assert resumed.generated == {"completions": count.completions, "tokens": count.tokens}


def test_curve_crossing():
    # gain +0.2 at k = 4, -0.2 at k = 16: half way in log2 k, k = 8
    assert curve_crossing([1, 4, 16, 64], [0.3, 0.2, -0.2, -0.1]) == pytest.approx(8.0)
    assert curve_crossing([1, 4, 16], [0.3, 0.2, -0.2], log_x=False) == pytest.approx(10.0)
    assert curve_crossing([1, 4, 16], [-0.1, 0.2, 0.1]) == 1.0  # never above at all
    assert math.isnan(curve_crossing([1, 4, 16], [0.3, 0.2, 0.1]))  # still above at the largest k
    assert curve_crossing([1, 2, 4], [0.3, float("nan"), 0.0]) == 4.0
    assert curve_crossing([1, 2, 4], [0.3, 0.1, -6e-8]) == 4.0  # float noise at saturation is a meeting
    assert math.isnan(curve_crossing([1, 2, 4], [0.3, 0.1, 3e-5]))
