"""The episode cache (:class:`lit_grpo.rollout.turns.EpisodeCache`): multi-turn episodes that keep each one's keys
and values between turns sample what the whole-history path samples, compute only the new tokens of a turn,
give the caches of ended episodes back at once, and fall back, saying why, past their memory bound.

Both paths run in every comparison: ``episode_cache_mib=0`` is the whole-history path (each turn prefills the
prompt, the earlier turns and the observations again), the default is the cache."""

from __future__ import annotations

import logging

import pytest
import torch

from lit_grpo.envs import Environment, Episode, StepResult, run_episodes
from lit_grpo.envs.base import user_messages
from lit_grpo.models.loading import load_policy, load_tokenizer
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout import turns as turns_mod
from lit_grpo.rollout.hf import GENERATE_DRAWS
from lit_grpo.rollout.turns import EpisodeCache, Turns
from lit_grpo.types import SamplingParams
from tests.envs.test_episodes_hf import RAW_TEMPLATE
from tests.rollout.test_hf_shared_prefill import ForwardWidths

PROMPTS = ["1+2=", "37+45=", "99+99="]
SAMPLED = SamplingParams(temperature=0.8, max_new_tokens=6)
# The cached turn and the whole-history forward sum the same products in other orders: float32's unit roundoff
# (6e-8) over sums of a few hundred terms of logits of size ~30 bounds a log-prob's gap near 1e-3; a token read
# at another position or in another context moves it by far more (the policy's log-probs span several nats).
LOGPROB_ATOL = 1e-3


class Mixed(Environment):
    """Observations of several lengths and endings, decided by the episode's record and turn: a short question,
    a long tool error (as a tool that raises gives), or the end of the episode; never ends in ``endless``."""

    ERROR = "error: ValueError('could not evaluate the expression, the tool raised before returning') =" * 2

    def __init__(self, endless: bool = False) -> None:
        self.endless = endless

    def reset(self, record):
        return Episode(record=record, messages=user_messages(record), state={"turn": 0})

    def step(self, episode, text):
        turn = episode.state["turn"] = episode.state["turn"] + 1
        kind = (int(episode.record["id"]) + turn + len(text)) % 3
        if kind == 2 and not self.endless:
            return StepResult([], done=True)
        content = self.ERROR if kind == 1 else f"{turn}+{len(text)}="
        return StepResult([{"role": "user", "content": content}], done=False)


def _records(prompts=PROMPTS):
    return [{"prompt": p, "reference": "", "id": str(i), "columns": {}} for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def tiny(sft_model_path):
    tokenizer = load_tokenizer(sft_model_path)
    tokenizer.chat_template = RAW_TEMPLATE
    return load_policy(sft_model_path), tokenizer


def _episodes(policy, tokenizer, cache_mib, seed=0, sampling=SAMPLED, env=None, n=4, **options):
    run = {k: options.pop(k) for k in ("max_turns", "max_episode_tokens") if k in options}
    engine = HFGenerateEngine(episode_cache_mib=cache_mib, **options)
    engine.bind(policy, tokenizer)
    torch.manual_seed(seed)
    return run_episodes(engine, tokenizer, _records(), env or Mixed(), n=n, sampling=sampling,
                        max_turns=run.get("max_turns", 4), max_episode_tokens=run.get("max_episode_tokens"))


def assert_same_episodes(cached, whole):
    """The same tokens, masks, endings and turns; the engine's log-probs within the rounding of the sums."""
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "policy_mask", "truncated"):
        assert torch.equal(getattr(cached, name), getattr(whole, name)), name
    assert cached.texts == whole.texts
    for a, b in zip(cached.episodes, whole.episodes, strict=True):
        assert (a.turns, a.turn_tokens, a.done, a.answered, a.truncated, a.messages) == \
            (b.turns, b.turn_tokens, b.done, b.answered, b.truncated, b.messages)
    torch.testing.assert_close(cached.logprobs, whole.logprobs, atol=LOGPROB_ATOL, rtol=0)
    assert not cached.logprobs[~cached.policy_mask].any()


DRAWS = [pytest.param({}, id="defaults"), pytest.param(GENERATE_DRAWS, id="generate-draws"),
         pytest.param({"batch_size": 5}, id="batches-of-5")]


@pytest.mark.parametrize("draws", DRAWS)
@pytest.mark.parametrize("max_turns", [1, 2, 3, 4])
def test_the_cache_samples_the_whole_history_paths_episodes(tiny, draws, max_turns):
    whole = _episodes(*tiny, 0, seed=max_turns, max_turns=max_turns, **draws)
    cached = _episodes(*tiny, 4096, seed=max_turns, max_turns=max_turns, **draws)
    assert_same_episodes(cached, whole)
    if max_turns > 1:  # the comparison covers episodes that went on, ended and errored
        turns = {ep.turns for ep in whole.episodes}
        assert max(turns) > 1 and any(Mixed.ERROR in str(ep.messages) for ep in whole.episodes)


def test_greedy_episodes_are_the_same(tiny):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    assert_same_episodes(_episodes(*tiny, 4096, sampling=greedy), _episodes(*tiny, 0, sampling=greedy))


@pytest.mark.parametrize("draws", DRAWS[:2])
def test_episodes_cut_by_max_turns_and_by_the_budget_are_the_same(tiny, draws):
    env = Mixed(endless=True)
    cut = _episodes(*tiny, 4096, env=env, max_turns=3, **draws)
    assert_same_episodes(cut, _episodes(*tiny, 0, env=env, max_turns=3, **draws))
    assert all(ep.truncated for ep in cut.episodes if ep.turns == 3)
    budget = _episodes(*tiny, 4096, env=env, max_turns=6, max_episode_tokens=30, **draws)
    assert_same_episodes(budget, _episodes(*tiny, 0, env=env, max_turns=6, max_episode_tokens=30, **draws))
    assert any(ep.truncated and ep.turns < 6 for ep in budget.episodes)  # the budget, not max_turns, ended them


def test_a_turn_computes_only_the_tokens_no_forward_has_read(tiny):
    policy, tokenizer = tiny
    with ForwardWidths(policy) as cached:
        r = _episodes(policy, tokenizer, 4096, env=Mixed(endless=True), max_turns=3, **GENERATE_DRAWS)
    with ForwardWidths(policy) as whole:
        _episodes(policy, tokenizer, 0, env=Mixed(endless=True), max_turns=3, **GENERATE_DRAWS)
    starts = lambda widths: [w for w in widths if w[1] > 1]  # noqa: E731 - each turn's first forward
    # turn 1: the 3 distinct prompts prefilled once (shared prefill), then a turn's new tokens only: the EOS that
    # ended the last turn and the observation, never the prompt and the earlier turns again
    assert starts(cached)[0] == (3, max(len(tokenizer.encode(p)) for p in PROMPTS) - 1)
    longest = max(len(tokenizer.encode(Mixed.ERROR, add_special_tokens=False)), 8) + 1
    assert all(w[1] <= longest for w in starts(cached)[1:]) and len(starts(cached)) == 3
    history = r.prompt_ids.shape[1] + int(r.completion_mask.sum(1).max())
    assert max(w[1] for w in starts(whole)) <= history
    for cached_turn, whole_turn in zip(starts(cached)[1:], starts(whole)[1:], strict=True):
        # the same rows; the whole path recomputes at least the prompt and the first turn again
        assert cached_turn[0] == whole_turn[0] and whole_turn[1] >= cached_turn[1] + min(map(len, PROMPTS))


class Spy(EpisodeCache):
    """An episode cache that records, after each turn, which episodes it holds."""

    log: list[set] = []

    def release(self, going):
        super().release(going)
        Spy.log.append(set(self.held))


def test_ended_episodes_give_their_cache_back_at_once(tiny, monkeypatch):
    policy, tokenizer = tiny
    engine = HFGenerateEngine()
    engine.bind(policy, tokenizer)
    Spy.log = []
    monkeypatch.setattr(engine, "turns", lambda: Spy(engine, 2**30))
    torch.manual_seed(1)
    r = run_episodes(engine, tokenizer, _records(), Mixed(), n=4, sampling=SAMPLED, max_turns=4)
    for k, held in enumerate(Spy.log[:-1]):  # after turn k + 1: exactly the episodes with another turn
        assert held == {i for i, ep in enumerate(r.episodes) if ep.turns > k + 1}
    assert Spy.log[-1] == set() and len(Spy.log) == max(ep.turns for ep in r.episodes) + 1  # closed: none held


def test_past_the_memory_bound_the_episodes_go_on_from_their_histories_saying_why(tiny, caplog):
    policy, tokenizer = tiny
    turns_mod.FALLBACK.forget_logged()
    with caplog.at_level(logging.INFO, logger=turns_mod.__name__):
        small = _episodes(policy, tokenizer, 1, env=Mixed(endless=True), max_turns=3,
                          sampling=SamplingParams(temperature=0.8, max_new_tokens=200))
    assert "over episode_cache_mib=1; raise it" in caplog.text
    big = _episodes(policy, tokenizer, 0, env=Mixed(endless=True), max_turns=3,
                    sampling=SamplingParams(temperature=0.8, max_new_tokens=200))
    assert_same_episodes(small, big)


def test_the_generate_decoder_and_a_zero_bound_keep_no_cache(tiny):
    policy, tokenizer = tiny
    assert type(HFGenerateEngine(episode_cache_mib=0).turns()) is Turns
    engine = HFGenerateEngine(decoder="generate")
    engine.bind(policy, tokenizer)
    whole = _episodes(policy, tokenizer, 0, decoder="generate")
    assert_same_episodes(_episodes(policy, tokenizer, 4096, decoder="generate"), whole)
    with pytest.raises(ValueError, match="episode_cache_mib=-1 must be >= 0"):
        HFGenerateEngine(episode_cache_mib=-1)


def test_a_history_that_does_not_extend_what_is_held_starts_afresh(tiny):
    policy, tokenizer = tiny
    engine = HFGenerateEngine(**GENERATE_DRAWS)
    engine.bind(policy, tokenizer)
    cache = engine.turns()
    prompt = tokenizer.encode("12+34=")
    torch.manual_seed(0)
    first = cache.generate(["a"], [prompt], 1, SAMPLED)
    held = cache.held["a"][0]
    assert held == (prompt + first.completion_ids[0][first.completion_mask[0]].tolist())[: len(held)]
    other = tokenizer.encode("5+5=")  # not the held tokens' continuation: computed whole
    torch.manual_seed(1)
    got = cache.generate(["a"], [other], 1, SAMPLED)
    torch.manual_seed(1)
    expected = engine.generate_ids([other], 1, SAMPLED)
    assert torch.equal(got.completion_ids, expected.completion_ids)
