"""Fault matrix, inputs: bad configs, bad data files, bad model directories and checkpoints. Each case
asserts the exit status ``lit-grpo fit`` ends with, that the message names the problem, and that the
checkpoint an earlier part of the run saved (``run_dir/ckpt``) is still there, unchanged."""

from __future__ import annotations

import shutil

import pytest

from tests.faults.fault_tools import MODEL, Saved, arithmetic_rows, config, fit, write_jsonl

CONFIG_CASES = {  # option: (value, what the message must contain)
    "model.init_args.optim.lr": (-1.0, "lr=-1.0 must be > 0"),
    "model.init_args.group_size": (1, "group_size=1 is too small"),
    "model.init_args.guards.reward_timeout_s": (0, "reward_timeout_s=0.0 must be a number of seconds > 0"),
    "model.init_args.guards.max_nonfinite_steps": (0, "max_nonfinite_steps=0 must be >= 1"),
    "data.prompts_per_step": (0, "prompts_per_step=0 must be >= 1"),
}


@pytest.mark.parametrize("option", CONFIG_CASES)
def test_a_bad_value_names_the_option_and_the_value(run_dir, option):
    value, pattern = CONFIG_CASES[option]
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, **{option: value}), run_dir)
    assert outcome.status == 1 and pattern in outcome.message
    assert saved.unchanged()


def test_an_unknown_option_fails_at_parse_time_naming_it(run_dir, capsys):
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir), run_dir, "--model.init_args.learning_rate=0.1")
    assert outcome.status == 2 and "learning_rate" in capsys.readouterr().err
    assert saved.unchanged()


def test_an_unknown_stop_signal_is_named(run_dir):
    cfg = config(run_dir)
    cfg["trainer"]["callbacks"].append({"class_path": "lit_grpo.checkpoint.SaveOnInterrupt",
                                        "init_args": {"signals": ["SIGTERM", "SIGPREEMPT"]}})
    saved = Saved(run_dir / "ckpt")
    outcome = fit(cfg, run_dir)
    assert outcome.status == 1 and "unknown ['SIGPREEMPT']" in outcome.message
    assert saved.unchanged()


# ---- data files ----------------------------------------------------------------------------------
def _file_data(path: str, **options) -> dict:
    return {"data.source": {"class_path": "lit_grpo.FileSource", "init_args": {"train": path}}, **options}


GOOD = arithmetic_rows(6)
DATA_CASES = {  # name: (lines of train.jsonl, what the message must contain)
    "malformed JSON": ([*GOOD[:2], '{"prompt": "1+2=", "answer": ', *GOOD[2:]], "line 3: malformed JSON"),
    "not UTF-8": ([*GOOD[:2], '{"prompt": "caf\u00e9", "answer": "1"}'.encode("latin-1"), *GOOD[2:]],
                  "line 3: not UTF-8 text"),
    "missing field": ([*GOOD, {"prompt": "1+1="}], "line 7: field 'answer' (answer_field) is missing"),
    "NaN answer": ([*GOOD, '{"prompt": "1+1=", "answer": NaN}'], "line 7: field 'answer' (answer_field) is the number nan"),
    "too few rows": (GOOD[:1], "has 1 prompts, fewer than prompts_per_step=2"),
    "empty file": ([], "has 0 prompts, fewer than prompts_per_step=2"),
}  # fmt: skip


@pytest.mark.parametrize("case", DATA_CASES)
def test_a_bad_data_file_names_the_file_line_and_problem(run_dir, case):
    lines, pattern = DATA_CASES[case]
    path = write_jsonl(run_dir / "train.jsonl", lines)
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, **_file_data(path)), run_dir)
    assert outcome.status == 1 and pattern in outcome.message
    if "line" in pattern:
        assert path in outcome.message
    assert saved.unchanged()


def test_a_missing_data_file_names_the_option_and_path(run_dir):
    missing = str(run_dir / "nope.jsonl")
    outcome = fit(config(run_dir, **_file_data(missing)), run_dir)
    assert outcome.status == 1 and f"train={missing!r}: no such file" in outcome.message


def test_a_data_path_that_is_a_folder_says_so(run_dir):
    outcome = fit(config(run_dir, **_file_data(str(run_dir))), run_dir)
    assert outcome.status == 1 and f"train={str(run_dir)!r} is a directory that Dataset.save_to_disk did not write" in outcome.message \
        and "give the data file in it" in outcome.message


def test_every_row_bad_and_skipped_says_they_were_skipped(run_dir):
    path = write_jsonl(run_dir / "train.jsonl", ["{oops", b'{"prompt": "\xff", "answer": "1"}'])
    outcome = fit(config(run_dir, **_file_data(path, **{"data.skip_bad_rows": True})), run_dir)
    assert outcome.status == 1
    assert "the training split has 0 prompts (2 bad rows were skipped: skip_bad_rows is set" in outcome.message


def test_skipped_bad_rows_are_counted_in_a_logged_metric_and_the_run_goes_on(run_dir):
    lines = [*GOOD[:2], b'{"prompt": "\xff", "answer": "1"}', "{oops", *GOOD[2:]]
    path = write_jsonl(run_dir / "train.jsonl", lines)
    outcome = fit(config(run_dir, steps=1, **_file_data(path, **{"data.skip_bad_rows": True})), run_dir)
    assert outcome.status == 0, outcome.message
    assert outcome.cli.trainer.callback_metrics["data/skipped_rows"] == 2
    assert outcome.cli.trainer.global_step == 1


def test_json_number_answers_are_references_a_completion_can_match(run_dir):
    rows = [*arithmetic_rows(4, answer=float), {"prompt": "1/4=", "answer": 0.25}]
    path = write_jsonl(run_dir / "train.jsonl", rows)
    outcome = fit(config(run_dir, steps=1, **_file_data(path)), run_dir)
    assert outcome.status == 0, outcome.message
    references = {r["prompt"]: r["reference"] for r in outcome.cli.datamodule.splits["train"]}
    assert references["0+1="] == "1" and references["3+4="] == "7" and references["1/4="] == "0.25"


# ---- settings that cannot fit together, found before the first step ------------------------------------------
FIT_CASES = {  # name: (options, what the message must contain)
    "prompt past the context": ({"model.init_args.sampling": {"max_new_tokens": 4000}},
                                "2 of 2 prompts leave no room for max_new_tokens=4000 in the model's 256-token context"),
    "overlong buffer past the completions": (
        {"model.init_args.shaping": {"class_path": "lit_grpo.OverlongPenalty", "init_args": {"buffer": 100}}},
        "OverlongPenalty: buffer=100 is longer than the completions (4 tokens: sampling.max_new_tokens"),
}  # fmt: skip


@pytest.mark.parametrize("case", FIT_CASES)
def test_settings_that_cannot_fit_are_named_before_a_step_is_trained(run_dir, case):
    options, pattern = FIT_CASES[case]
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, **options), run_dir)
    assert outcome.status == 1 and pattern in outcome.message
    assert outcome.cli is None or outcome.cli.trainer.global_step == 0
    assert saved.unchanged()


# ---- model directories and checkpoints -----------------------------------------------------------
def _model_copy(tmp, drop=(), truncate=None):
    folder = tmp / "model"
    shutil.copytree(MODEL, folder)
    for name in drop:
        (folder / name).unlink()
    if truncate:
        data = (folder / truncate).read_bytes()
        (folder / truncate).write_bytes(data[: len(data) // 2])
    return str(folder)


MODEL_CASES = {  # name: (how the directory is damaged, what the message must contain)
    "no such directory": (None, "no such directory"),
    "config but no weights": ({"drop": ["model.safetensors"]}, "has a config.json but no weights"),
    "truncated weights": ({"truncate": "model.safetensors"}, "model.safetensors is damaged"),
    "no tokenizer": ({"drop": ["tokenizer.json", "tokenizer_config.json"]}, "has no tokenizer"),
    "no config": ({"drop": ["config.json"]}, "has no config.json"),
}


@pytest.mark.parametrize("case", MODEL_CASES)
def test_a_bad_model_directory_names_the_path_and_what_is_missing_or_damaged(run_dir, case):
    damage, pattern = MODEL_CASES[case]
    model = str(run_dir / "absent") if damage is None else _model_copy(run_dir, **damage)
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, **{"model.init_args.model": model}), run_dir)
    assert outcome.status == 1 and pattern in outcome.message and model in outcome.message
    assert saved.unchanged()


def test_a_truncated_checkpoint_names_the_file_and_the_others_to_resume_from(run_dir, reference):
    shutil.copy(reference["step"](1), run_dir / "ckpt" / "step=1.ckpt")
    broken = run_dir / "ckpt" / "broken.ckpt"
    broken.write_bytes((run_dir / "ckpt" / "last.ckpt").read_bytes()[:5000])
    saved = Saved(run_dir / "ckpt")
    outcome = fit(config(run_dir, steps=4), run_dir, f"--ckpt_path={broken}")
    assert outcome.status == 1
    assert f"the checkpoint {broken} (5000 bytes) is damaged or truncated" in outcome.message
    assert "its folder also holds: last.ckpt, step=1.ckpt" in outcome.message
    assert saved.unchanged()


def test_a_missing_checkpoint_is_named(run_dir):
    missing = run_dir / "ckpt" / "nope.ckpt"
    outcome = fit(config(run_dir, steps=4), run_dir, f"--ckpt_path={missing}")
    assert outcome.status == 1 and str(missing) in outcome.message and "not found" in outcome.message


# ---- output folders ------------------------------------------------------------------------------
def _export(folder) -> dict:
    return {"class_path": "lit_grpo.callbacks.SavePretrained", "init_args": {"dirpath": str(folder)}}


OUTPUT_CASES = {  # name: (where a regular file sits, the config's output folders, what the message must contain)
    "checkpoint folder is a file": ("ckpt2", "ckpt2", "trainer.callbacks (ModelCheckpoint) dirpath="),
    "a file on the checkpoint path": ("ckpt2", "ckpt2/inner", "trainer.callbacks (ModelCheckpoint) dirpath="),
    "export folder is a file": ("export", "export", "trainer.callbacks (SavePretrained) dirpath="),
}


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_an_output_folder_that_cannot_be_made_is_named_before_the_first_step(run_dir, case):
    blocker, folder, pattern = OUTPUT_CASES[case]
    (run_dir / blocker).write_text("a regular file")
    cfg = config(run_dir, steps=1)
    if "export" in case:
        cfg["trainer"]["callbacks"].append(_export(run_dir / folder))
    else:
        cfg["trainer"]["callbacks"][0]["init_args"]["dirpath"] = str(run_dir / folder)
    saved = Saved(run_dir / "ckpt")
    outcome = fit(cfg, run_dir)
    assert outcome.status == 1 and pattern in outcome.message  # not an OS error after the first step
    assert f"{run_dir / blocker} is a file, not a folder" in outcome.message
    assert saved.unchanged()


# ---- what a failed start leaves --------------------------------------------------------------------
def _logged(run_dir) -> dict:
    return {"trainer.logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                               "init_args": {"save_dir": str(run_dir / "runs"), "name": "t"}}}


def test_a_failed_start_leaves_no_version_folder_and_the_next_run_takes_the_next_number(run_dir):
    versions = run_dir / "runs" / "t"
    assert fit(config(run_dir, steps=1, **_logged(run_dir)), run_dir).status == 0
    assert sorted(p.name for p in versions.iterdir()) == ["version_0"]
    # a refused start after the config was saved (a missing checkpoint), and one that fails in the data
    missing = fit(config(run_dir, steps=4, **_logged(run_dir)), run_dir, f"--ckpt_path={run_dir / 'nope.ckpt'}")
    bad = write_jsonl(run_dir / "bad.jsonl", ["{oops"])
    broken = fit(config(run_dir, **_logged(run_dir), **_file_data(bad)), run_dir)
    assert missing.status == 1 and broken.status == 1
    assert sorted(p.name for p in versions.iterdir()) == ["version_0"]  # version_0 logged a step: it stays
    assert fit(config(run_dir, steps=1, **_logged(run_dir)), run_dir).status == 0
    assert sorted(p.name for p in versions.iterdir()) == ["version_0", "version_1"]
