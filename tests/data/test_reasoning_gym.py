"""ReasoningGymSource and ReasoningGymScore: records, disjoint splits, the generators' own verifiers as a guarded
reward, clear errors, and a two-step fit from the tiny config. Offline; skipped where reasoning-gym is absent
(pip install 'lit-grpo[reasoning]'), except the test of the error that says so."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import pytest

from lit_grpo.data import PromptDataModule
from lit_grpo.data.reasoning_gym import COLUMNS, DEFAULT_INSTRUCTION, ReasoningGymScore, ReasoningGymSource
from lit_grpo.data.records import collate_prompts
from lit_grpo.rewards import RewardGuard

ROOT = Path(__file__).resolve().parents[2]
needs_rg = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None,
    reason="reasoning-gym is not installed (pip install 'lit-grpo[reasoning]')",
)
SMALL = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # 200 distinct problems


def batch(source: ReasoningGymSource, split: str = "val"):
    return collate_prompts(source.load(split))


@needs_rg
def test_records_carry_the_question_reference_and_json_columns():
    source = ReasoningGymSource("chain_sum", SMALL, num_train=12, num_val=4, num_test=3, style="plain")
    splits = {s: source.load(s) for s in ("train", "val", "test")}
    assert [len(splits[s]) for s in ("val", "test")] == [4, 3] and 0 < len(splits["train"]) <= 12
    record = splits["val"][0]
    assert record["id"] == "val-0"
    assert record["prompt"].startswith("State the final answer to the following arithmetic problem: ")
    assert record["prompt"].endswith(DEFAULT_INSTRUCTION) and "<answer>" in record["prompt"]
    assert set(record["columns"]) == set(COLUMNS)
    json.dumps(splits)  # every record, columns included, is JSON
    entry = json.loads(record["columns"]["rg_entry"])
    assert entry["answer"] == record["reference"] and entry["question"] in record["prompt"]
    assert json.loads(record["columns"]["rg_source"]) == {"dataset": "chain_sum", "config": SMALL, "seed": 0,
                                                          "size": 19}  # fmt: skip
    assert [r["columns"]["rg_index"] for r in splits["test"]] == [4, 5, 6]  # after val's 0..3


@needs_rg
def test_splits_are_disjoint_and_the_holdout_does_not_move_with_num_train():
    """chain_sum of 2-6 terms of 3-4 digits has a space far larger than 1300 draws: every question is new."""
    big = {"min_digits": 3}
    source = ReasoningGymSource("chain_sum", big, num_train=1000, num_val=150, num_test=150, style="plain")
    questions = {s: {r["prompt"] for r in source.load(s)} for s in ("train", "val", "test")}
    assert [len(questions[s]) for s in ("train", "val", "test")] == [1000, 150, 150]
    assert not questions["train"] & questions["val"]
    assert not questions["train"] & questions["test"]
    assert not questions["val"] & questions["test"]
    other = ReasoningGymSource("chain_sum", big, num_train=10, num_val=150, num_test=150, style="plain")
    assert {r["prompt"] for r in other.load("val")} == questions["val"]
    # why not seeds seed, seed+1, seed+2: item i of seed s is item i-1 of seed s+1
    shifted = ReasoningGymSource("chain_sum", big, num_train=0, num_val=150, num_test=0, seed=1, style="plain")
    assert len({r["prompt"] for r in shifted.load("val")} & questions["val"]) >= 149


@needs_rg
def test_train_drops_questions_the_holdout_holds():
    source = ReasoningGymSource("chain_sum", SMALL, num_train=300, num_val=60, num_test=60, style="plain")
    held = {r["prompt"] for s in ("val", "test") for r in source.load(s)}
    train = source.load("train")
    assert len(train) < 300 and not {r["prompt"] for r in train} & held


@needs_rg
@pytest.mark.parametrize(
    "dataset, config, wrong",
    [("chain_sum", SMALL, "?"), ("spell_backward", {}, "?")],  # "?" shares no character: no partial credit
)
def test_the_reward_is_the_generators_own_score(dataset, config, wrong):
    source = ReasoningGymSource(dataset, config, num_train=0, num_val=6, num_test=0, style="plain")
    b = batch(source)
    reward = ReasoningGymScore()
    right = reward([f"I think.\n<answer> {ref} </answer>" for ref in b.references], b.references, **b.columns)
    assert right.scores.tolist() == [1.0] * 6
    completions = [f"<answer>{wrong}</answer>"] * 3 + ["the answer is " + b.references[3], "", "<answer></answer>"]
    out = reward(completions, b.references, **b.columns)
    assert out.scores.tolist() == [0.0] * 6
    assert out.counters["no_answer"] == 2 and out.counters["errors"] == 0
    # the first line, for models that answer bare
    assert ReasoningGymScore("line")([f"{r}\nmore" for r in b.references], b.references, **b.columns).scores.sum() == 6


@needs_rg
def test_the_last_number_reading_for_models_that_answer_in_prose():
    source = ReasoningGymSource("chain_sum", SMALL, num_train=0, num_val=4, num_test=0, style="plain")
    b = batch(source)
    reward = ReasoningGymScore("last_number")
    out = reward([f"1 and 2 make 3, so it is {r}." for r in b.references], b.references, **b.columns)
    assert out.scores.tolist() == [1.0] * 4
    out = reward(["no number here"] * 4, b.references, **b.columns)
    assert out.scores.tolist() == [0.0] * 4 and out.counters["no_answer"] == 4


@needs_rg
def test_partial_credit_off_makes_the_reward_binary():
    source = ReasoningGymSource("basic_arithmetic", SMALL, num_train=0, num_val=6, num_test=0, style="plain")
    b = batch(source)
    padded = [f"{ref}1" for ref in b.references]  # contains the reference: basic_arithmetic's partial credit
    exact = [f"so {ref}" for ref in b.references]
    completions, references = padded + exact, b.references * 2
    columns = {k: v * 2 for k, v in b.columns.items()}
    partial = ReasoningGymScore("last_number")(completions, references, **columns).scores
    assert ((partial > 0) & (partial < 1)).any() and (partial[6:] == 1).all()
    binary = ReasoningGymScore("last_number", partial_credit=False)
    assert binary.binary is True and ReasoningGymScore().binary is None
    assert binary(completions, references, **columns).scores.tolist() == (partial == 1).float().tolist()


@needs_rg
def test_entries_rebuild_from_the_columns_or_regenerate(monkeypatch):
    source = ReasoningGymSource("chain_sum", SMALL, num_train=0, num_val=2, num_test=0, style="plain")
    b = batch(source)
    assert b.columns["rg_exact"] == [False, False]  # chain_sum records tuples in its metadata: regenerated
    reward = ReasoningGymScore()
    columns = {**b.columns, "rg_exact": [True, True]}  # read from the JSON instead
    assert reward([f"<answer>{r}</answer>" for r in b.references], b.references, **columns).scores.tolist() == [1, 1]
    wrong_reference = [str(int(r) + 1) for r in b.references]  # the regenerated answer differs: an error, not a 0
    out = reward([f"<answer>{r}</answer>" for r in wrong_reference], wrong_reference, **b.columns)
    assert all(math.isnan(s) for s in out.scores.tolist()) and out.counters["errors"] == 2


@needs_rg
def test_a_scorer_that_raises_or_hangs_is_guarded(monkeypatch):
    from reasoning_gym.arithmetic.chain_sum import ChainSumDataset

    source = ReasoningGymSource("chain_sum", SMALL, num_train=0, num_val=3, num_test=0, style="plain")
    b = batch(source)
    completions = [f"<answer>{r}</answer>" for r in b.references]

    def broken(self, answer, entry):
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(ChainSumDataset, "score_answer", broken)
    out = RewardGuard(timeout_s=10)(ReasoningGymScore(), completions, b.references, **b.columns)
    assert all(math.isnan(s) for s in out.scores.tolist()) and out.counters["errors"] == 3

    def hangs(self, answer, entry):
        time.sleep(30)

    monkeypatch.setattr(ChainSumDataset, "score_answer", hangs)
    start = time.monotonic()
    out = RewardGuard(timeout_s=0.5)(ReasoningGymScore(), completions, b.references, **b.columns)
    assert time.monotonic() - start < 5
    assert all(math.isnan(s) for s in out.scores.tolist()) and out.counters["timeouts"] == 3


@needs_rg
def test_records_of_another_source_are_a_guarded_error_naming_the_columns():
    out = RewardGuard(timeout_s=10)(ReasoningGymScore(), ["<answer>1</answer>"], ["1"])
    assert math.isnan(out.scores[0]) and out.counters["errors"] == 1
    with pytest.raises(ValueError, match="rg_source, rg_index, rg_entry, rg_exact"):
        ReasoningGymScore()(["<answer>1</answer>"], ["1"])


@needs_rg
@pytest.mark.parametrize(
    "dataset, config, message",
    [
        ("chain_sums", {}, r"'chain_sums' is not a reasoning-gym dataset \(close names: chain_sum"),
        ("chain_sum", {"max_term": 3}, r"'max_term' is not an option of reasoning-gym dataset 'chain_sum' \(did you "
         r"mean max_terms"),
        ("chain_sum", {"min_terms": 0}, r"of reasoning-gym dataset 'chain_sum' is invalid: AssertionError: min_terms"),
        ("chain_sum", {"seed": 3}, "use the source's options seed and num_train"),
    ],
)
def test_a_bad_dataset_or_config_is_a_clear_error(dataset, config, message):
    with pytest.raises(ValueError, match=message):
        ReasoningGymSource(dataset, config)


def test_without_reasoning_gym_loading_names_the_extra(monkeypatch):
    source = ReasoningGymSource("chain_sum", {"max_terms": 2})  # builds: a config parses without the package
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import reasoning_gym now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'lit-grpo\[reasoning\]'"):
        source.load("train")


@needs_rg
@pytest.mark.slow
def test_a_two_step_fit_from_the_tiny_config(tmp_path, monkeypatch):
    from lit_grpo.cli import LitGRPOCLI

    monkeypatch.chdir(tmp_path)
    cli = LitGRPOCLI(args=["--config", str(ROOT / "configs/tasks/reasoning_gym_tiny.yaml"), "--trainer.max_steps=2",
                           "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"],
                     run=False)  # fmt: skip
    assert isinstance(cli.datamodule, PromptDataModule) and isinstance(cli.model.reward, ReasoningGymScore)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 2
    reward = cli.trainer.callback_metrics["rollout/reward_mean"]
    assert 0.0 <= float(reward) <= 1.0


@needs_rg
def test_the_configs_cell_holds_about_500_distinct_questions():
    """docs/data.md and configs/tasks/reasoning_gym.yaml keep that config's hold-outs small for this reason."""
    import reasoning_gym
    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "configs/tasks/reasoning_gym.yaml").read_text())
    source = config["data"]["source"]["init_args"]
    items = reasoning_gym.create_dataset(source["dataset"], size=20000, seed=0, **source["config"])
    assert 400 <= len({item["question"] for item in items}) <= 600  # 484 here
