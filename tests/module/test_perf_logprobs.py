"""The faster and leaner paths give what the plain ones give: chunked LM-head log-probs, the HF engine's
per-step sampling log-probs, length-sorted micro-batches and the fused AdamW step."""

import lightning as L
import pytest
import torch
from torch import nn

import lit_grpo.module as module_mod
import lit_grpo.optim as optim_mod
from lit_grpo import logprobs as logprobs_mod
from lit_grpo.logprobs import chunked_head_logprobs, sequence_logprobs, token_entropy, token_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout.hf import GENERATE_DRAWS
from lit_grpo.types import SamplingParams
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def test_chunked_head_matches_full_logits_values_and_gradients():
    torch.manual_seed(0)
    head = nn.Linear(16, 50, bias=False)
    hidden = torch.randn(3, 5, 16, requires_grad=True)  # [N, T, H]
    ids = torch.randint(0, 50, (3, 5))  # [N, T]
    logits = head(hidden)  # [N, T, V]
    full = token_logprobs(logits, ids, 0.7)
    full_entropy = token_entropy(logits.detach(), 0.7)
    full_grads = torch.autograd.grad(
        (full * torch.rand(3, 5, generator=torch.Generator().manual_seed(1))).sum(), [hidden, head.weight]
    )
    chunked, entropy = chunked_head_logprobs(head, hidden, ids, 0.7, chunk_rows=4, with_entropy=True)
    grads = torch.autograd.grad(
        (chunked * torch.rand(3, 5, generator=torch.Generator().manual_seed(1))).sum(), [hidden, head.weight]
    )
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy, full_entropy, atol=1e-5, rtol=0)
    for got, want in zip(grads, full_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def _rollouts(path: str, n: int = 4, max_new_tokens: int = 8):
    torch.manual_seed(0)
    policy, tokenizer = load_policy(path), load_tokenizer(path)
    engine = HFGenerateEngine()
    engine.bind(policy, tokenizer)
    return policy, engine.generate(
        ["12+3=", "7+80=", "5+5="], n, SamplingParams(1.0, max_new_tokens=max_new_tokens)
    )


def test_sequence_logprobs_in_head_chunks_equals_whole_logits(tiny_model_path, monkeypatch):
    policy, rollouts = _rollouts(tiny_model_path)
    weights = torch.rand(rollouts.completion_ids.shape, generator=torch.Generator().manual_seed(1))  # [N, T]

    def run():
        policy.zero_grad()
        logp, entropy = sequence_logprobs(policy, rollouts, 0.7, with_entropy=True)
        (logp * weights * rollouts.completion_mask).sum().backward()
        with torch.no_grad():
            frozen, _ = sequence_logprobs(policy, rollouts, 0.7)
        return logp.detach(), entropy, frozen, {k: p.grad.clone() for k, p in policy.named_parameters()}

    plain = run()
    vocab = policy.get_output_embeddings().out_features
    monkeypatch.setattr(logprobs_mod, "MAX_LOGITS_ELEMENTS", 5 * vocab)  # 5 positions per head call
    calls = []
    handle = policy.get_output_embeddings().register_forward_hook(lambda m, a, out: calls.append(out.shape))
    chunked = run()
    handle.remove()
    assert calls and all(len(shape) == 2 and shape[0] <= 5 for shape in calls)  # never a [N, T, V] tensor
    for got, want in zip(chunked[:3], plain[:3], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    for k in plain[3]:
        torch.testing.assert_close(chunked[3][k], plain[3][k], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("use_cache", [True, False])
def test_engine_logprobs_equal_those_of_the_whole_generation_logits(tiny_model_path, use_cache):
    policy, tokenizer = load_policy(tiny_model_path), load_tokenizer(tiny_model_path)
    engine = HFGenerateEngine(use_cache=use_cache, **GENERATE_DRAWS)  # generate's tokens, compared below
    engine.bind(policy, tokenizer)
    sampling = SamplingParams(0.8, max_new_tokens=10)
    torch.manual_seed(3)
    rollouts = engine.generate(["1+2=", "34+5="], 3, sampling)
    enc = tokenizer(["1+2=", "34+5="], padding=True, padding_side="left", return_tensors="pt")
    torch.manual_seed(3)
    policy.eval()
    out = policy.generate(
        input_ids=enc["input_ids"].repeat_interleave(3, 0),
        attention_mask=enc["attention_mask"].repeat_interleave(3, 0),
        do_sample=True,
        temperature=0.8,
        top_p=1.0,
        top_k=None,  # no top-k filter (left out, generate would apply its default of 50)
        max_new_tokens=10,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=engine.eos_ids(),
        use_cache=use_cache,
        return_dict_in_generate=True,
        output_logits=True,
    )
    new = out.sequences[:, enc["input_ids"].shape[1] :]  # [N, T]
    expected = token_logprobs(torch.stack(out.logits, dim=1), new, 0.8) * rollouts.completion_mask
    assert torch.equal(
        rollouts.completion_ids, new.masked_fill(~rollouts.completion_mask, tokenizer.pad_token_id)
    )
    torch.testing.assert_close(rollouts.logprobs, expected, atol=1e-6, rtol=0)
    assert not policy._forward_hooks and not policy._forward_pre_hooks  # the engine's hooks are gone


class GradCapture(L.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads = {k: p.grad.detach().clone() for k, p in pl_module.policy.named_parameters()}


def test_length_sorted_micro_batches_give_the_full_batch_gradient(tmp_path, sft_model_path, monkeypatch):
    lengths, grads = [], []
    real = module_mod.sequence_logprobs

    def recording(policy, mb, *args, **kwargs):
        if torch.is_grad_enabled():
            lengths.append((mb.prompt_mask.sum(-1) + mb.completion_mask.sum(-1)).tolist())
        return real(policy, mb, *args, **kwargs)

    monkeypatch.setattr(module_mod, "sequence_logprobs", recording)
    for micro in (None, 2):
        lengths.clear()
        L.seed_everything(0)
        module = tiny_module(sft_model_path, micro_batch_size=micro, max_new_tokens=6, shared_prefix=False,
                             elide_zero_advantage=False)  # every completion trained: 8 micro-batches of 2
        # (shared_prefix keeps whole groups together instead: tests/module/test_shared_prefix.py)
        capture = GradCapture()
        tiny_trainer(tmp_path, max_steps=1, callbacks=[capture]).fit(module, datamodule=tiny_data())
        grads.append(capture.grads)
    flat = [x for mb in lengths for x in mb]
    assert len(lengths) == 8 and flat == sorted(flat) and len(set(flat)) > 1  # sorted, and lengths did vary
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], atol=1e-6, rtol=1e-4)


def test_fused_adamw_takes_the_default_step(tiny_model_path):
    steps = []
    for fused in (False, True):
        policy = load_policy(tiny_model_path)
        params = list(policy.parameters())
        assert optim_mod._fused_ok(params)
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=fused)
        for _ in range(3):
            for i, p in enumerate(params):
                p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(i))
            opt.step()
        steps.append([p.detach().clone() for p in params])
    for got, want in zip(steps[1], steps[0], strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
