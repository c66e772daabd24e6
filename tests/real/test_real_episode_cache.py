"""The episode cache on SmolLM2-135M-Instruct with its own tokenizer and chat template (30 layers, grouped-query
heads, the template's bridge tokens between turns): the whole-history path's episodes, and a search episode of the
shipped collection. Speed: bench/agent_step.py."""

from __future__ import annotations

import pytest
import torch

from lit_grpo.envs import run_episodes
from lit_grpo.envs.search import SearchEnvironment
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout.hf import GENERATE_DRAWS
from lit_grpo.types import SamplingParams
from tests.real.conftest import NAME
from tests.rollout.test_episode_cache import Mixed, assert_same_episodes

pytestmark = pytest.mark.slow
QUESTIONS = ["What is 2 + 3? Reply with the number only.", "Name a colour. One word only.",
             "Who wrote Hamlet? Reply with the surname only."]
SEARCH = ["Where was Ilsa Varnholt born? Call the search tool."]


def _episodes(policy, tokenizer, cache_mib, env, prompts, draws, turns=3, seed=0):
    engine = HFGenerateEngine(episode_cache_mib=cache_mib, **draws)
    engine.bind(policy, tokenizer)
    records = [{"prompt": p, "reference": "", "id": str(i), "columns": {}} for i, p in enumerate(prompts)]
    torch.manual_seed(seed)
    return run_episodes(engine, tokenizer, records, env, n=3, sampling=SamplingParams(0.7, max_new_tokens=40),
                        max_turns=turns, max_episode_tokens=600)


@pytest.fixture(scope="module")
def smol(real_model):
    return load_policy(NAME).eval(), load_tokenizer(NAME)


@pytest.mark.parametrize("draws", [{}, GENERATE_DRAWS], ids=["defaults", "generate-draws"])
def test_smollm2_episodes_are_the_whole_history_paths(smol, draws):
    cached = _episodes(*smol, 4096, Mixed(endless=True), QUESTIONS, draws, turns=3)
    whole = _episodes(*smol, 0, Mixed(endless=True), QUESTIONS, draws, turns=3)
    assert max(ep.turns for ep in whole.episodes) == 3  # several turns, bridged by the template's tokens
    assert_same_episodes(cached, whole)


def test_smollm2_search_episodes_are_the_same(smol):
    env = SearchEnvironment(k=2, max_doc_chars=300, isolation="none")
    cached = _episodes(*smol, 4096, env, SEARCH, GENERATE_DRAWS, seed=1)
    assert_same_episodes(cached, _episodes(*smol, 0, env, SEARCH, GENERATE_DRAWS, seed=1))
