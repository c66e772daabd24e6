"""RewardModel on a tiny sequence-classification model built in code and saved to disk: its score is the
model's logit of the pair as written through the chat template (batched or not), it combines in a WeightedSum,
and a model that is no reward model is refused before training, naming the problem."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

from lit_grpo.rewards import RewardGuard, RewardModel, WeightedSum
from lit_grpo.rewards.exact_match import ExactMatch


def _save(tmp_path, tiny_model_path, labels: int):
    config = AutoConfig.from_pretrained(tiny_model_path)
    config.num_labels = labels
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    out = tmp_path / f"rm{labels}"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(out)
    return str(out), model


def test_the_score_is_the_models_logit_of_the_pair_in_any_batch_size(tmp_path, tiny_model_path):
    path, model = _save(tmp_path, tiny_model_path, labels=1)
    prompts, completions = ["1+1=", "2+3=", "9+9="], ["2", "5", "18"]
    columns = {"prompts": prompts, "conversations": [None] * 3}
    whole = RewardGuard()(RewardModel(path, batch_size=8), completions, ["x"] * 3, **columns).scores
    single = RewardGuard()(RewardModel(path, batch_size=1), completions, ["x"] * 3, **columns).scores
    reward = RewardModel(path)
    with torch.no_grad():
        expected = torch.stack([model(**reward.tokenizer(reward.text(p, c, None), return_tensors="pt")).logits[0, 0]
                                for p, c in zip(prompts, completions, strict=True)])
    # one float32 forward per pair against padded batches: the same sums in another order
    torch.testing.assert_close(whole, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(single, expected, rtol=1e-4, atol=1e-5)
    assert len(set(whole.tolist())) == 3  # the pairs are told apart


def test_it_combines_with_other_rewards(tmp_path, tiny_model_path):
    path, _ = _save(tmp_path, tiny_model_path, labels=1)
    both = WeightedSum([ExactMatch(), RewardModel(path, scale=0.0)], weights=[1.0, 1.0])
    out = RewardGuard()(both, ["2", "4"], ["2", "5"], prompts=["a", "b"], conversations=[None, None])
    assert out.scores.tolist() == [1.0, 0.0] and "RewardModel" in out.terms


def test_a_model_that_is_no_reward_model_is_refused_naming_the_fix(tmp_path, tiny_model_path):
    path, _ = _save(tmp_path, tiny_model_path, labels=3)
    with pytest.raises(ValueError, match="head has 3 outputs; a reward model has one"):
        RewardModel(path)
    with pytest.raises(ValueError, match="is not a directory"):
        RewardModel(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="dtype='float64' must be one of"):
        RewardModel(path, dtype="float64")


def _save_value_head(tmp_path, tiny_model_path, rows: int = 1, shard: str | None = None, safe: bool = True):
    """A causal LM saved as TRL's AutoModelForCausalLMWithValueHead saves one: its weights and
    ``v_head.summary.*`` in the same checkpoint."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    head = torch.nn.Linear(model.config.hidden_size, rows)
    state = {**model.state_dict(), "v_head.summary.weight": head.weight.detach().clone(),
             "v_head.summary.bias": head.bias.detach().clone()}
    out = tmp_path / f"vh{rows}-{shard}-{safe}"
    model.save_pretrained(out, state_dict=state, **({"max_shard_size": shard} if shard else {}))
    if not safe:  # the older format, as TRL's save of a PEFT value-head model still writes it
        (out / "model.safetensors").unlink()
        torch.save(state, out / "pytorch_model.bin")
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(out)
    return str(out), model, head


@pytest.mark.parametrize(("shard", "safe"), [(None, True), ("200KB", True), (None, False)])
def test_a_causal_lm_with_a_value_head_scores_with_the_head_at_the_last_token(tmp_path, tiny_model_path, shard, safe):
    path, model, head = _save_value_head(tmp_path, tiny_model_path, shard=shard, safe=safe)
    prompts, completions = ["1+1=", "2+3=", "9+9="], ["2", "5", "18"]
    columns = {"prompts": prompts, "conversations": [None] * 3}
    reward = RewardModel(path, batch_size=2)  # a padded batch and a batch of one
    assert reward.head is not None
    out = RewardGuard()(reward, completions, ["x"] * 3, **columns).scores
    with torch.no_grad():
        expected = torch.stack([
            head(model(**reward.tokenizer(reward.text(p, c, None), return_tensors="pt"), output_hidden_states=True)
                 .hidden_states[-1][0, -1])[0] for p, c in zip(prompts, completions, strict=True)])
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)  # the same sums in another order
    assert len(set(out.tolist())) == 3


def test_a_value_head_of_the_wrong_shape_is_refused_before_training(tmp_path, tiny_model_path):
    path, _, _ = _save_value_head(tmp_path, tiny_model_path, rows=2)
    with pytest.raises(ValueError, match=r"value head v_head.summary.weight has shape \(2, \d+\); a value head maps"):
        RewardModel(path)
