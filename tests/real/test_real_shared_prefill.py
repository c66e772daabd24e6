"""Shared prefill on SmolLM2-135M-Instruct (30 layers, chat prompts of different lengths): the plain path's
greedy answers, and sampling log-probs that the training forward reproduces. Speed: bench/shared_prefill.py."""

from __future__ import annotations

import pytest
import torch

from lit_grpo.logprobs import sequence_logprobs
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.types import SamplingParams
from tests.real.conftest import NAME

pytestmark = pytest.mark.slow


def _generate(policy, tokenizer, prompts, sampling, shared):
    engine = HFGenerateEngine(shared_prefill=shared)
    engine.bind(policy, tokenizer)
    torch.manual_seed(0)
    return engine.generate(prompts, 2, sampling)


def test_shared_prefill_matches_the_plain_path(real_model):
    policy, tokenizer = load_policy(NAME).eval(), load_tokenizer(NAME)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                             add_generation_prompt=True)
               for question in ("What is 2 + 3? Answer with the number only.",
                                "What is 17 - 9? Please answer with the number only, nothing else.")]
    greedy = SamplingParams(0.0, max_new_tokens=8)
    plain = _generate(policy, tokenizer, prompts, greedy, shared=False)
    shared = _generate(policy, tokenizer, prompts, greedy, shared=True)
    assert not plain.prompt_mask[0, 0]  # the first prompt is left padded
    assert torch.equal(shared.completion_ids, plain.completion_ids) and "5" in shared.texts[0]
    sampled = _generate(policy, tokenizer, prompts, SamplingParams(1.0, max_new_tokens=8), shared=True)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy, sampled)
    torch.testing.assert_close(logp * sampled.completion_mask, sampled.logprobs, atol=1e-4, rtol=1e-4)
