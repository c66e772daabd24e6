"""Fault matrix, during a run: faulty rewards, a diverging run, resuming with changed settings. Each case
asserts the exit status ``lit-grpo fit`` ends with, that the message (or the logged counters) name the
problem, and that the checkpoints already saved are kept."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.faults.fault_tools import MODEL, Saved, checkpoint_step, config, fit, params, same_params

FAULTS = "tests.faults.fault_tools"
#: Where a new run checkpoints: ModelCheckpoint never overwrites the ckpt/last.ckpt an earlier run left.
NEW_LAST = "ckpt/last-v1.ckpt"


def _reward(name: str, **init_args) -> dict:
    return {"model.init_args.reward": {"class_path": f"{FAULTS}.{name}", "init_args": init_args}}


# ---- faulty rewards: P=2 prompts x G=2 completions = 4 items per call --------------------------------
REWARD_RUNS = {  # name: (reward, extra options, steps, counter of the last step: value)
    "raises on one call": (_reward("Raising", calls=[2]), {}, 2, ("reward/errors", 4)),
    "returns NaN": (_reward("Constant", value="nan"), {}, 1, ("reward/unscorable", 4)),
    "returns inf": (_reward("Constant", value="inf"), {}, 1, ("reward/errors", 4)),
    "hangs on one call": (_reward("Hanging", seconds=600, calls=[2]), {"model.init_args.guards.reward_timeout_s": 1.0},
                          2, ("reward/timeouts", 4)),
}  # fmt: skip


@pytest.mark.parametrize("case", REWARD_RUNS)
def test_a_faulty_reward_call_is_nan_and_counted_and_the_run_goes_on(run_dir, case):
    reward, options, steps, (counter, value) = REWARD_RUNS[case]
    saved, start = Saved(run_dir / "ckpt"), time.monotonic()
    outcome = fit(config(run_dir, steps=steps, **reward, **options), run_dir)
    assert outcome.status == 0, outcome.message
    metrics = outcome.cli.trainer.callback_metrics
    assert metrics[counter] == value and metrics["rollout/unscorable_frac"] == 1.0
    assert outcome.cli.trainer.global_step == steps and checkpoint_step(run_dir / NEW_LAST) == steps
    assert time.monotonic() - start < 120  # a hang is cut at its time limit, not waited out
    assert saved.unchanged()


ALWAYS_FAILING = {  # name: (reward, what the message must contain)
    "raises": (_reward("Raising"), ["reward 'Raising' failed on every completion of each of its first 3 calls",
                                    "ConnectionError: the scoring service is down"]),  # the cause, chained
    "returns NaN": (_reward("Constant", value="nan"),
                    ["reward 'Constant' failed on every completion of each of its first 3 calls",
                     "unscorable 4 of 4 in the last one"]),
}  # fmt: skip


@pytest.mark.parametrize("case", ALWAYS_FAILING)
def test_a_reward_that_always_fails_stops_the_run_naming_it_and_keeps_the_checkpoints(run_dir, case):
    reward, patterns = ALWAYS_FAILING[case]
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, steps=5, **reward), run_dir)
    assert outcome.status == 1
    assert all(pattern in outcome.message for pattern in patterns), outcome.message[-2000:]
    assert checkpoint_step(run_dir / NEW_LAST) == 2 and saved.unchanged()  # steps 1, 2 saved; step 3 stopped


def test_a_reward_returning_the_wrong_number_of_scores_names_the_reward_and_the_contract(run_dir):
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, **_reward("Constant", short=True)), run_dir)
    assert outcome.status == 1
    assert "reward 'Constant' returned scores of shape (3,) for 4 completions; Constant.__call__ must return" \
        in outcome.message
    assert saved.unchanged()


def test_a_diverging_run_stops_after_max_nonfinite_steps_in_a_row(run_dir):
    saved = Saved(run_dir / "ckpt")
    options = {**_reward("Exploding"), "model.init_args.estimator": {"class_path": "lit_grpo.DrGRPO"},
               "model.init_args.guards.max_nonfinite_steps": 2}
    outcome = fit(config(run_dir, steps=6, **options), run_dir)
    assert outcome.status == 1
    assert "the run diverged: 2 optimizer steps in a row, up to step 2, had a non-finite loss" in outcome.message
    assert "max_nonfinite_steps" in outcome.message
    assert checkpoint_step(run_dir / NEW_LAST) == 1 and saved.unchanged()  # the first skipped step was saved


def test_a_run_that_collapsed_with_finite_weights_stops_after_max_collapsed_steps(run_dir):
    saved = Saved(run_dir / "ckpt")
    cfg = config(run_dir, steps=6, **{"model.init_args.guards.max_collapsed_steps": 2})
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.Collapse"})
    outcome = fit(cfg, run_dir)
    assert outcome.status == 1
    assert "the run collapsed: for 2 steps in a row, up to step 2, the policy sampled near-uniform tokens" \
        in outcome.message
    assert "guards.max_collapsed_steps" in outcome.message and "lower optim.lr" in outcome.message
    assert checkpoint_step(run_dir / NEW_LAST) == 1 and saved.unchanged()  # the first collapsed step was saved


def test_non_finite_logits_in_sampling_stop_the_run_with_advice_not_inside_transformers(run_dir):
    saved = Saved(run_dir / "ckpt")
    cfg = config(run_dir, steps=2)
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.Poison"})
    outcome = fit(cfg, run_dir)
    assert outcome.status == 1
    assert "FloatingPointError: sampling stopped: the policy's next-token probabilities are not finite" \
        in outcome.message and "lower optim.lr" in outcome.message
    assert saved.unchanged()


def test_a_healthy_run_samples_far_from_uniform(run_dir):
    outcome = fit(config(run_dir, steps=1), run_dir)
    nll = outcome.cli.trainer.callback_metrics["rollout/sampled_nll"].item()
    vocab = outcome.cli.model.policy.config.vocab_size
    assert outcome.status == 0 and 0 < nll < 0.95 * math.log(vocab)


# ---- resuming with changed settings -------------------------------------------------------------------
class RecordPrompts(L.Callback):
    """The prompt ids of every training step."""

    def __init__(self) -> None:
        self.ids: list[list[str]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.ids.append(list(batch.ids))


REFUSED = {  # option: (new value, what the message must name)
    "data.seed": (1, "seed: checkpoint 0, this run 1"),
    "data.source.init_args.num_train": (20, "train_prompts: checkpoint 16, this run 20"),
    "model.init_args.dtype": ("bfloat16", "dtype: checkpoint float32, this run bfloat16"),
    "model.init_args.group_size": (4, "group_size: checkpoint 2, this run 4"),
}


@pytest.mark.parametrize("option", REFUSED)
def test_resuming_with_a_setting_that_changes_the_saved_state_is_refused_naming_it(run_dir, option):
    value, pattern = REFUSED[option]
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, steps=4, **{option: value}), run_dir, f"--ckpt_path={run_dir / 'ckpt/last.ckpt'}")
    assert outcome.status == 1 and pattern in outcome.message and "Resume with the checkpoint's" in outcome.message
    assert saved.unchanged()


def test_a_refused_resume_names_every_difference_at_once(run_dir):
    options = {"data.seed": 1, "model.init_args.group_size": 4, "model.init_args.dtype": "bfloat16"}
    outcome = fit(config(run_dir, steps=4, **options), run_dir, f"--ckpt_path={run_dir / 'ckpt/last.ckpt'}")
    assert outcome.status == 1
    assert all(REFUSED[option][1] in outcome.message for option in options), outcome.message[-2000:]


def test_resuming_with_as_many_other_prompts_is_refused_naming_the_data_and_the_fix(run_dir):
    saved = Saved(run_dir / "ckpt")  # the checkpoint was trained on the prompts of source seed 0
    cfg = config(run_dir, steps=4, **{"data.source.init_args.seed": 1})  # 16 prompts again, other ones
    outcome = fit(cfg, run_dir, f"--ckpt_path={run_dir / 'ckpt/last.ckpt'}")
    assert outcome.status == 1
    assert "train_data: checkpoint 16 records, sha256 " in outcome.message, outcome.message[-2000:]
    assert "point data.source at the data the checkpoint was trained on, or start a fresh run" in outcome.message
    assert saved.unchanged()


def test_a_checkpoint_older_than_the_data_fingerprint_resumes_warning_that_the_data_is_unchecked(
    run_dir, reference, caplog
):
    path = run_dir / "ckpt/last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["lit_grpo"]["fingerprint"].pop("train_data", None)  # as checkpoints of earlier versions hold it
    torch.save(checkpoint, path)
    with caplog.at_level(logging.WARNING):
        outcome = fit(config(run_dir, steps=4), run_dir, f"--ckpt_path={path}")
    assert outcome.status == 0, outcome.message
    assert "the content of the training data could not be checked" in caplog.text
    assert same_params(params(outcome.cli.model), reference["params"])


def test_resuming_with_another_prompts_per_step_continues_at_the_next_unseen_prompt(run_dir, reference):
    cfg = config(run_dir, steps=3, **{"data.prompts_per_step": 4})
    cfg["trainer"]["callbacks"].append({"class_path": f"{__name__}.RecordPrompts"})
    outcome = fit(cfg, run_dir, f"--ckpt_path={run_dir / 'ckpt/last.ckpt'}")
    assert outcome.status == 0, outcome.message
    order = [r["id"] for r in outcome.cli.datamodule.train_dataset().ordered(0)]  # the epoch's order
    (seen,) = next(c for c in outcome.cli.trainer.callbacks if isinstance(c, RecordPrompts)).ids
    assert seen == order[4:8]  # steps 1 and 2 took 2 prompts each: the 5th prompt is next, not the 9th


def test_settings_that_change_neither_state_nor_position_resume_exactly(run_dir, reference, monkeypatch):
    monkeypatch.chdir(Path(MODEL).parents[1])  # the model as a relative path with a trailing slash
    cfg = config(run_dir, steps=4, **{"model.init_args.model": "assets/tiny-arith-sft/",
                                      "model.init_args.guards.reward_timeout_s": 60.0, "trainer.log_every_n_steps": 7})
    outcome = fit(cfg, run_dir, f"--ckpt_path={run_dir / 'ckpt/last.ckpt'}")
    assert outcome.status == 0, outcome.message
    assert same_params(params(outcome.cli.model), reference["params"])
