"""Generation from a LoRA policy with the adapters folded into copies of the weights: the same samples as
the unfolded adapters, the trained weights untouched."""

import pytest
import torch

from lit_grpo.lora import LoraSettings, apply_lora, merged_for_inference
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import SamplingParams

PROMPTS = ["1+2=", "37+45=", "9+9="]


@pytest.fixture()
def lora_policy(sft_model_path):
    torch.manual_seed(0)
    policy = apply_lora(load_policy(sft_model_path),
                        LoraSettings(r=4, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    with torch.no_grad():  # adapters start at B = 0 (no effect); give them one so folding has work to do
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return policy, load_tokenizer(sft_model_path)


def _snapshot(policy):
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def _generate(policy, tokenizer, merge, sampling, seed=0):
    engine = HFGenerateEngine(merge_lora=merge)
    engine.bind(policy, tokenizer)
    torch.manual_seed(seed)
    return engine.generate(PROMPTS, 4, sampling)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_folded_generation_equals_the_adapters(lora_policy, temperature):
    policy, tokenizer = lora_policy
    before = _snapshot(policy)
    sampling = SamplingParams(max_new_tokens=6, temperature=temperature)
    plain = _generate(policy, tokenizer, False, sampling)
    folded = _generate(policy, tokenizer, True, sampling)
    assert torch.equal(plain.completion_ids, folded.completion_ids)
    torch.testing.assert_close(folded.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    after = _snapshot(policy)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), "folding changed the policy's weights"


def test_folding_changes_the_forward_only_inside(lora_policy):
    policy, tokenizer = lora_policy
    ids = tokenizer(["12+34="], return_tensors="pt").input_ids
    policy.eval()
    with torch.no_grad():
        adapted = policy(input_ids=ids).logits
        with merged_for_inference(policy) as merged:
            assert merged
            inside = policy(input_ids=ids).logits
            lora_a = next(m for n, m in policy.named_modules() if n.endswith("q_proj"))
            assert lora_a.get_base_layer().weight.requires_grad is False
        outside = policy(input_ids=ids).logits
        with policy.disable_adapter():
            base = policy(input_ids=ids).logits
    torch.testing.assert_close(inside, adapted, atol=1e-5, rtol=0)
    assert torch.equal(outside, adapted)
    assert (base - adapted).abs().max() > 1e-3  # the adapters do change the output, so the check above bites


def test_nothing_to_fold_without_adapters(sft_model_path):
    policy = load_policy(sft_model_path)
    before = _snapshot(policy)
    with merged_for_inference(policy) as merged:
        assert merged is False
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in before.items())


def test_the_weight_sync_view_is_the_folded_model_and_leaves_the_weights_exact(lora_policy):
    """``merged_adapters`` (what the vLLM weight sync reads) yields ``W + delta`` and puts ``W`` back bit for bit,
    where peft's merge/unmerge round trip would leave rounding error in the frozen weights."""
    from lit_grpo.rollout.weights import full_weights, merged_adapters

    policy, _ = lora_policy
    before = _snapshot(policy)
    q = next(m for n, m in policy.named_modules() if n.endswith("layers.0.self_attn.q_proj"))
    expected = q.get_base_layer().weight.detach() + q.get_delta_weight(q.active_adapters[0])
    with merged_adapters(policy) as plain:
        weights = dict(full_weights(plain))
    name = next(k for k in weights if k.endswith("layers.0.self_attn.q_proj.weight"))
    torch.testing.assert_close(weights[name], expected, atol=1e-6, rtol=0)
    assert not torch.equal(weights[name], before[next(k for k in before if k.endswith(
        "layers.0.self_attn.q_proj.base_layer.weight"))])
    after = _snapshot(policy)
    assert all(torch.equal(before[k], after[k]) for k in before), "the sync view changed the policy's weights"
