"""LoRA through peft: only adapters train, the KL reference is the adapter-free base, peft-format export."""

from __future__ import annotations

import json
from unittest import mock

import lightning as L
import pytest
import torch

import lit_grpo.module as module_mod
from lit_grpo import HFGenerateEngine, SamplingParams, Sign
from lit_grpo.callbacks.export import SavePretrained
from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.lora import LoraSettings
from lit_grpo.losses import PPOClip
from lit_grpo.models.loading import load_policy
from lit_grpo.rollout.weights import full_weights, merged_adapters
from tests.helpers import tiny_data, tiny_module, tiny_trainer

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj"])


def _state(module):
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


def test_lora_trains_only_the_adapters_against_the_base_model(tmp_path, sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, lora=LORA, loss=PPOClip(beta=0.1))
    with mock.patch.object(module_mod, "load_policy", wraps=module_mod.load_policy) as second_copy:
        module.configure_model()
        before = _state(module)
        tiny_trainer(tmp_path, max_steps=2).fit(module, datamodule=tiny_data())
    assert second_copy.call_count == 0 and module.ref_policy is None  # no second model in memory
    after = _state(module)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert {k for k in before if "lora_B" in k} <= changed  # every adapter moved away from its zero init
    trainable = {n for n, p in module.policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


def test_kl_reference_is_the_base_model_with_adapters_disabled(tmp_path, sft_model_path):
    L.seed_everything(0)
    # Sign's +-1 advantages move the adapters whatever the sampled groups score
    module = tiny_module(sft_model_path, lora=LORA, loss=PPOClip(beta=0.1), estimator=Sign())
    tiny_trainer(tmp_path, max_steps=1).fit(module, datamodule=tiny_data())
    rollouts = module.engine.generate(["1+2=", "13+4="], 2, SamplingParams(max_new_tokens=4))
    reference = module._reference_logprobs(rollouts, module_mod.PhaseTimer())
    base = load_policy(sft_model_path).eval()
    expected, _ = sequence_logprobs(base, rollouts)
    torch.testing.assert_close(reference * rollouts.completion_mask, expected * rollouts.completion_mask)
    trained, _ = sequence_logprobs(module.policy, rollouts)
    assert not torch.allclose(trained * rollouts.completion_mask, expected * rollouts.completion_mask)


def test_adapters_export_in_peft_format_and_merge(tmp_path, sft_model_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    L.seed_everything(0)
    module = tiny_module(sft_model_path, lora=LORA)
    out = tmp_path / "export"
    tiny_trainer(tmp_path, max_steps=2, callbacks=[SavePretrained(str(out), merge=True)]).fit(
        module, datamodule=tiny_data()
    )
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    assert not (out / "model.safetensors").exists()  # adapters only, not the base weights
    ids = torch.tensor([[5, 20, 21, 30, 17, 40]])
    module.policy.eval()
    with torch.no_grad():
        expected = module.policy(input_ids=ids).logits
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sft_model_path), out).eval()
        torch.testing.assert_close(loaded(input_ids=ids).logits, expected)
        merged = AutoModelForCausalLM.from_pretrained(out / "merged").eval()
        torch.testing.assert_close(merged(input_ids=ids).logits, expected, atol=1e-5, rtol=1e-4)
    # what a rollout engine that keeps its own copy (vLLM) receives: the merged weights, in base names
    with merged_adapters(module.policy) as plain:
        streamed = {k: v.clone() for k, v in full_weights(plain)}  # views: copied before the unmerge
    for name, value in merged.state_dict().items():
        torch.testing.assert_close(streamed[name], value, atol=1e-6, rtol=1e-5, msg=name)
    assert not any("lora_" in k for k in streamed)


def test_a_meta_device_copy_exports_the_same_adapters(tmp_path, sft_model_path):
    """The copy that FSDP1 exports go through (its module names carry no FSDP wrappers) writes the same
    adapter file and config as the model itself, from the same full state dict."""
    from safetensors.torch import load_file

    from lit_grpo.lora import apply_lora, meta_copy

    policy = apply_lora(load_policy(sft_model_path), LORA)
    for name, param in policy.named_parameters():
        if "lora_B" in name:
            param.data.normal_()  # fresh lora_B is zero: make the values tell
    state = policy.state_dict()
    policy.save_pretrained(tmp_path / "real", state_dict=state)
    meta_copy(policy).save_pretrained(tmp_path / "meta", state_dict=state)
    real, meta = (load_file(tmp_path / d / "adapter_model.safetensors") for d in ("real", "meta"))
    assert len(real) == 18 and real.keys() == meta.keys()  # lora_A and lora_B of 3 modules in 3 blocks
    assert all(torch.equal(real[k], meta[k]) for k in real)
    real_config, meta_config = (json.loads((tmp_path / d / "adapter_config.json").read_text()) for d in ("real", "meta"))
    for config in (real_config, meta_config):  # peft keeps them in a set: its order varies between runs
        config["target_modules"] = sorted(config["target_modules"])
    assert real_config == meta_config


def test_generation_runs_on_the_peft_model(sft_model_path):
    L.seed_everything(0)
    module = tiny_module(sft_model_path, lora=LORA, engine=HFGenerateEngine())
    module.configure_model()
    rollouts = module.engine.generate(["1+2="], 3, SamplingParams(max_new_tokens=4))
    assert len(rollouts) == 3 and rollouts.completion_mask.any()


def test_bad_lora_settings_name_the_option(sft_model_path):
    with pytest.raises(ValueError, match="lora.r=0"):
        LoraSettings(r=0)
    with pytest.raises(ValueError, match="lora.dropout=1"):
        LoraSettings(dropout=1.0)
    with pytest.raises(ValueError, match="lora.alpha"):
        LoraSettings(alpha=0)
    module = tiny_module(sft_model_path, lora=LoraSettings(target_modules=["no_such_proj"]))
    with pytest.raises(ValueError, match="lora.target_modules"):
        module.configure_model()
