"""Multi-turn rollouts: every live episode of a step decodes together, turn by turn, token-exact.

An episode's sequence is its prompt (the opening messages rendered by the chat template) followed by the
assistant turns the policy sampled and, between them, the bridge tokens of the chat template
(:meth:`~lit_grpo.envs.chat.ChatFormat.bridge_ids`: the end of the turn, the observations, the next generation
prompt). Sampled tokens are kept exactly as the engine returned them and the next turn continues from the
token ids (:meth:`~lit_grpo.rollout.RolloutEngine.generate_ids`), never from re-tokenised text.

The returned :class:`~lit_grpo.types.Rollouts` holds everything after the prompt in ``completion_ids`` /
``completion_mask`` and marks the sampled tokens in ``policy_mask``; engine log-probs are 0 off it.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal, TypeVar

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.envs.base import TURN_REDUCTIONS, Environment, Episode, Record, run_coroutine, step_async
from lit_grpo.envs.chat import ChatFormat
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import eos_token_ids, pad_prompts
from lit_grpo.rollout.turns import Turns
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams

T = TypeVar("T")
#: What an unanswered episode is scored: a number, ``score`` (as if it had answered) or ``drop`` (unscorable).
TruncatedReward = float | Literal["score", "drop"]
#: Seed offset of turn ``k`` (``SamplingParams.seed + k * TURN_SEED_STRIDE``), so turns do not replay
#: one stream.
TURN_SEED_STRIDE = 1_000_003


def records_of(batch: PromptBatch) -> list[Record]:
    """The records of a prompt batch, in the form environments are reset from."""
    return [{"prompt": p, "reference": r, "id": i, "columns": {k: v[j] for k, v in batch.columns.items()}}
            for j, (p, r, i) in enumerate(zip(batch.prompts, batch.references, batch.ids, strict=True))]


class _Track:
    """The token side of one episode: prompt ids, then the completion with its masks and log-probs."""

    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt
        self.ids: list[int] = []
        self.sampled: list[bool] = []
        self.logprobs: list[Tensor] = []  # float32 pieces, kept as the engine's tensors (bit-exact)

    def add(self, ids: list[int], logprobs: Tensor | None) -> None:
        self.ids += ids
        self.sampled += [logprobs is not None] * len(ids)
        self.logprobs.append(torch.zeros(len(ids)) if logprobs is None else logprobs.float().cpu())


def check_truncated_reward(value: TruncatedReward) -> TruncatedReward:
    """``value`` if it is a valid ``truncated_reward`` (a finite number, ``score`` or ``drop``); else an
    error that says what is valid."""
    ok = value in ("score", "drop") if isinstance(value, str) else \
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    require(ok, f"truncated_reward={value!r}: use a finite number (the reward of an episode that never "
                "answered, e.g. 0), 'score' (score its last turn as an answer) or 'drop' (unscorable: left "
                "out of its group)")
    return float(value) if not isinstance(value, str) else value


def run_episodes(engine: RolloutEngine, tokenizer, records: Sequence[Record], environment: Environment,
                 n: int, sampling: SamplingParams, max_turns: int = 4, max_episode_tokens: int | None = None,
                 chat: ChatFormat | None = None, truncated_reward: TruncatedReward = 0.0,
                 max_observation_tokens: int | None = None) -> Rollouts:
    """``n`` episodes of each record (group-major, as :meth:`RolloutEngine.generate`), run to the end.

    An episode ends when the environment says done, after ``max_turns`` assistant turns, when its tokens after
    the prompt would exceed ``max_episode_tokens`` (null: no limit beyond ``sampling.max_new_tokens`` per
    turn) or the engine's context (:meth:`RolloutEngine.max_sequence_length`), or when a turn ends without an
    EOS token; all but the first set ``truncated``. Each turn samples at most ``sampling.max_new_tokens``
    tokens. The environment's ``reward`` is read for every episode at the end (``Episode.reward``).

    An episode is *answered* when the environment ended it, or when its last turn was cut without EOS and the
    environment reads it as an answer (:meth:`Environment.answers`: no tool call); a cut answer is scored as a
    cut completion is in one-turn training. An unanswered episode (its last turn asked for another: a tool
    call on the last allowed turn, or one whose result does not fit the budget) gets ``truncated_reward``:
    that number (default 0), ``score`` (its reward as usual, the last turn scored as if it were the answer) or
    ``drop`` (NaN: unscorable, left out of its group's statistics with advantage 0).

    An observation longer than ``max_observation_tokens`` tokens (its content encoded alone; null: no cap) is
    cut to its first ``max_observation_tokens`` tokens followed by ``[result cut at N tokens]``. Observations
    that do not fit the room the episode has left (its budget) are cut further, the longest first, so that the
    next turn keeps ``sampling.max_new_tokens`` tokens, or half the room when less remains; where even empty
    observations would not fit, the episode ends unanswered (``context_exhausted``). Both are counted
    (``Episode.observations_cut``, ``Episode.context_exhausted``; ``env/observations_cut``,
    ``env/context_exhausted_frac``). A long text is cut in characters before it is tokenised, to a length that
    holds more than the tokens kept (each token decodes to at most as many characters as its longest
    vocabulary entry), so a megabyte-long result costs what its first tokens cost.
    """
    truncated_reward = check_truncated_reward(truncated_reward)
    require(max_turns >= 1, f"max_turns={max_turns} must be >= 1")
    require(max_episode_tokens is None or max_episode_tokens >= 1,
            f"max_episode_tokens={max_episode_tokens} must be >= 1 or null")
    require(max_observation_tokens is None or max_observation_tokens >= 1,
            f"max_observation_tokens={max_observation_tokens} must be >= 1 or null")
    require(n >= 1 and len(records) >= 1,
            f"need at least one record and n >= 1 (got {len(records)} records, n={n})")
    chat = chat or ChatFormat(tokenizer)
    budget = max_episode_tokens or sys.maxsize
    context = engine.max_sequence_length()
    eos = set(eos_token_ids(getattr(engine, "policy", None), tokenizer))
    episodes = [_reset(environment, r) for r in records for _ in range(n)]
    for ep in episodes:
        ep.max_turns = max_turns
    tracks = [_Track(chat.prompt_ids(ep.messages, ep.tools, ep.tool_instructions)) for ep in episodes]
    budgets = [_budget(budget, context, t, ep) for t, ep in zip(tracks, episodes, strict=True)]
    live = list(range(len(episodes)))
    device = None
    turns = engine.turns()  # what the engine keeps of each live episode between its turns
    try:
        for turn in range(max_turns):
            if not live:
                break
            limits = {i: min(sampling.max_new_tokens, budgets[i] - len(tracks[i].ids)) for i in live}
            seed = None if sampling.seed is None else sampling.seed + turn * TURN_SEED_STRIDE
            turn_sampling = replace(sampling, max_new_tokens=max(limits.values()), seed=seed)
            out = _generate(turns, tracks, live, n if turn == 0 else 1, turn_sampling)
            device = device or out.completion_ids.device
            answers = []  # the environment answers the live episodes' turns together (see Environment.astep)
            for row, i in enumerate(live):
                tokens = out.completion_ids[row][out.completion_mask[row]][: limits[i]].tolist()
                tracks[i].add(tokens, out.logprobs[row, : len(tokens)])
                answers.append(_answer(environment, chat, episodes[i], tracks[i], tokens, eos, tokenizer,
                                       budgets[i], last=turn == max_turns - 1, cap=max_observation_tokens,
                                       turn_tokens=sampling.max_new_tokens))
            going = _run_all(answers)
            live = [i for i, goes_on in zip(live, going, strict=True) if goes_on]
            turns.release(live)
    finally:
        turns.close()
    for ep in episodes:
        ep.reward = _timed(ep, lambda ep=ep: environment.reward(ep))  # always read: it may close a session
        how = environment.turn_reduction(ep)
        if how is not None:
            require(ep.reward is None, f"{type(environment).__name__} declares turn_reward={how!r} and its "
                                       f"reward() returned {ep.reward!r}: an episode has one reward source; "
                                       "return None from reward() or set turn_reward to None")
            ep.reward = float(TURN_REDUCTIONS[how](ep.turn_rewards))
        if not ep.answered and truncated_reward != "score":
            ep.reward = math.nan if truncated_reward == "drop" else truncated_reward
    return _assemble(tracks, episodes, n, tokenizer.pad_token_id, device)


def _budget(budget: int, context: int | None, track: _Track, episode: Episode) -> int:
    """How many tokens an episode may hold after its prompt: ``max_episode_tokens``, within the context."""
    if context is None:
        return budget
    room = context - len(track.prompt)
    require(room >= 1, f"the prompt of record {episode.record.get('id')!r} has {len(track.prompt)} tokens, "
                       f"which leaves no room in the engine's {context}-token context; shorten the prompt")
    return min(budget, room)


def _generate(turns: Turns, tracks: list[_Track], live: list[int], n: int,
              sampling: SamplingParams) -> Rollouts:
    """One turn for the ``live`` episodes. The first turn samples each record's ``n`` episodes from their one
    prompt (as :meth:`RolloutEngine.generate` does) where the ``n`` prompts agree."""
    if n > 1:
        heads = [tracks[i].prompt for i in live[::n]]
        if all(tracks[i].prompt == heads[j // n] for j, i in enumerate(live)):
            return turns.generate(live, heads, n, sampling)
    return turns.generate(live, [tracks[i].prompt + tracks[i].ids for i in live], 1, sampling)


def _run_all(answers: list) -> list[bool]:
    """Runs the turns' coroutines together on one event loop, in this thread where it runs none (so a tool run
    inline keeps the main thread's time limit); an environment's exception stops them all and propagates."""
    async def together() -> list[bool]:
        return list(await asyncio.gather(*answers))

    return run_coroutine(together())


async def _answer(environment: Environment, chat: ChatFormat, episode: Episode, track: _Track,
                  tokens: list[int], eos: set[int], tokenizer, budget: int, last: bool,
                  cap: int | None = None, turn_tokens: int = 1) -> bool:
    """Records the sampled turn ``tokens`` and the environment's answer; True while the episode goes on.

    The turn's text is its tokens decoded as sampled (special tokens included) without the EOS that ends it.
    Observations join ``episode.messages`` only when their tokens join the episode (a further turn reads
    them).
    """
    history = list(episode.messages)
    ended = bool(tokens) and tokens[-1] in eos
    text = tokenizer.decode(tokens[:-1] if ended else tokens, skip_special_tokens=False)
    episode.messages.append({"role": "assistant", "content": text})
    episode.turns += 1
    episode.turn_tokens.append(len(tokens))
    if not ended:  # the turn hit its token limit: no boundary to continue from
        episode.truncated = True
        episode.answered = bool(_timed(episode, lambda: environment.answers(episode, text)))
        _turn_reward(environment, episode, None)
        return False
    # no turn would read a result
    if last and not _timed(episode, lambda: environment.answers(episode, text)):
        episode.truncated = True
        _turn_reward(environment, episode, None)
        return False
    start = time.perf_counter()
    try:
        result = await step_async(environment, episode, text)
    finally:
        episode.env_seconds += time.perf_counter() - start
    _turn_reward(environment, episode, result.reward)
    if result.done:
        episode.done = episode.answered = True
        return False
    if last:  # no turn left to read the observations
        episode.truncated = True
        return False
    room = budget - len(track.ids)  # tokens left for the bridge and the next turn

    def bridge_of(messages: list) -> list[int]:
        return chat.bridge_ids(history, messages, episode.tools, episode.tool_instructions, tokens[-1])

    observations = [_capped(_head(m, tokenizer, room), tokenizer, cap) for m in result.observations]
    bridge = bridge_of(observations)
    if len(bridge) >= room:  # no room to sample one token after them: cut them to the room
        fitted = _fit(observations, bridge_of, room, turn_tokens, tokenizer)
        if fitted is None:
            episode.truncated = episode.context_exhausted = True
            return False
        observations, bridge = fitted
    episode.observations_cut += sum(m.get("content") != o.get("content")
                                    for m, o in zip(observations, result.observations, strict=True))
    episode.messages.extend(observations)
    track.add(bridge, None)
    return True


def _turn_reward(environment: Environment, episode: Episode, reward) -> None:
    """Records the reward of the turn just sampled (None: 0) when the environment gives per-turn rewards."""
    how = environment.turn_reduction(episode)
    if how is None:
        require(reward is None, f"{type(environment).__name__}.step returned a turn reward ({reward!r}) but "
                                "the environment declares no turn_reward; set turn_reward to how the turns' "
                                f"rewards make the episode's ({', '.join(TURN_REDUCTIONS)})")
        return
    require(how in TURN_REDUCTIONS, f"{type(environment).__name__}: turn_reward={how!r} is not a reduction; "
                                    f"use one of {list(TURN_REDUCTIONS)}")
    require(reward is None or (isinstance(reward, int | float) and not isinstance(reward, bool)),
            f"{type(environment).__name__}.step returned the turn reward {reward!r}; a turn reward is "
            "a number")
    episode.turn_rewards.append(0.0 if reward is None else float(reward))


def _capped(message: dict, tokenizer, cap: int | None) -> dict:
    """``message`` with its content cut to its first ``cap`` tokens, marked, when it is longer."""
    content = message.get("content")
    if cap is None or not isinstance(content, str):
        return message
    ids = tokenizer.encode(_head(message, tokenizer, cap)["content"], add_special_tokens=False)
    return message if len(ids) <= cap else _cut(message, tokenizer, ids, cap)


def _cut(message: dict, tokenizer, ids: list[int], cap: int) -> dict:
    return {**message, "content": tokenizer.decode(ids[:cap]) + f"\n[result cut at {cap} tokens]"}


def _fit(observations: list[dict], bridge_of: Callable[[list], list[int]], room: int, turn_tokens: int,
         tokenizer) -> tuple[list[dict], list[int]] | None:
    """``(the observations, their bridge)`` with the bridge leaving the next turn ``turn_tokens`` tokens of
    ``room``, or half of what the bridge's own tokens leave when that is less; None when even empty
    observations would leave less than two tokens. The longest contents are cut first, down to one level."""
    text = [isinstance(m.get("content"), str) for m in observations]
    empty = bridge_of([{**m, "content": ""} if t else m for m, t in zip(observations, text, strict=True)])
    free = room - len(empty)
    if free < 2:
        return None
    target = room - min(turn_tokens, free // 2)  # the most tokens the bridge may take
    ids = [tokenizer.encode(m["content"], add_special_tokens=False) if t else []
           for m, t in zip(observations, text, strict=True)]
    caps = [len(i) for i in ids]
    cut, bridge = observations, bridge_of(observations)
    for _ in range(4):  # the marks and the template's joins shift a few tokens: correct by what is over
        if len(bridge) <= target:
            return cut, bridge
        caps = _level(caps, len(bridge) - target)
        if caps is None:
            return None
        cut = [_cut(m, tokenizer, i, c) if c < len(i) else m
               for m, i, c in zip(observations, ids, caps, strict=True)]
        bridge = bridge_of(cut)
    return None


def _level(caps: list[int], over: int) -> list[int] | None:
    """``caps`` with the largest lowered to one level, so that they sum to at least ``over`` fewer; None when
    that would leave a content no token."""
    for level in range(max(caps, default=0) - 1, 0, -1):
        if sum(max(0, c - level) for c in caps) >= over:
            return [min(c, level) for c in caps]
    return None


#: each tokenizer's longest vocabulary entry, in characters (an upper bound of what one token decodes to)
_LONGEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _head(message: dict, tokenizer, tokens: int) -> dict:
    """``message`` with its content cut to a length in characters that holds more than ``tokens`` tokens, so
    that a megabyte-long result is never tokenised whole: a text of more characters than twice ``tokens + 8``
    times the longest vocabulary entry has more than ``tokens`` tokens (the factor two covers normalisers
    that fold characters)."""
    content = message.get("content")
    if not isinstance(content, str) or tokens >= sys.maxsize // 4:
        return message
    if tokenizer not in _LONGEST:
        _LONGEST[tokenizer] = max(map(len, tokenizer.get_vocab()), default=1)
    limit = 2 * (tokens + 8) * _LONGEST[tokenizer]
    return message if len(content) <= limit else {**message, "content": content[:limit]}


def _reset(environment: Environment, record: Record) -> Episode:
    start = time.perf_counter()
    episode = environment.reset(record)
    require(isinstance(episode, Episode),
            f"{type(environment).__name__}.reset returned {type(episode).__name__}; it must return "
            "an Episode")
    episode.env_seconds += time.perf_counter() - start
    return episode


def _timed(episode: Episode, call: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = call()
    episode.env_seconds += time.perf_counter() - start
    return result


def _assemble(tracks: list[_Track], episodes: list[Episode], n: int, pad: int, device) -> Rollouts:
    prompt_ids, prompt_mask = pad_prompts([t.prompt for t in tracks], pad)  # [N, Tp]
    width = max(len(t.ids) for t in tracks)
    ids = torch.full((len(tracks), width), pad, dtype=torch.long)  # [N, T]
    exists = torch.zeros(len(tracks), width, dtype=torch.bool)  # [N, T]
    sampled = torch.zeros(len(tracks), width, dtype=torch.bool)  # [N, T]
    logprobs = torch.zeros(len(tracks), width)  # [N, T]
    for row, t in enumerate(tracks):
        k = len(t.ids)
        ids[row, :k] = torch.as_tensor(t.ids, dtype=torch.long)
        exists[row, :k] = True
        sampled[row, :k] = torch.as_tensor(t.sampled, dtype=torch.bool)
        logprobs[row, :k] = torch.cat(t.logprobs) if t.logprobs else torch.zeros(0)
    device = device or "cpu"
    return Rollouts(
        prompt_ids=prompt_ids.to(device), prompt_mask=prompt_mask.to(device), completion_ids=ids.to(device),
        completion_mask=exists.to(device), logprobs=logprobs.to(device),
        texts=[ep.final_answer for ep in episodes],
        truncated=torch.tensor([ep.truncated for ep in episodes], device=device),
        group_size=n, policy_mask=sampled.to(device), episodes=episodes,
    )


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """One step's ``env/…`` scalars: means per episode, totals of errors, timeouts and seconds."""
    k = max(len(episodes), 1)
    return {
        "env/turns_mean": sum(e.turns for e in episodes) / k,
        "env/tool_calls_mean": sum(e.tool_calls for e in episodes) / k,
        "env/truncated_frac": sum(e.truncated for e in episodes) / k,
        "env/unanswered_frac": sum(not e.answered for e in episodes) / k,
        "env/seconds": sum(e.env_seconds for e in episodes),
        "env/tool_errors": float(sum(e.tool_errors for e in episodes)),
        "env/tool_timeouts": float(sum(e.tool_timeouts for e in episodes)),
        "env/observations_cut": float(sum(e.observations_cut for e in episodes)),
        "env/context_exhausted_frac": sum(e.context_exhausted for e in episodes) / k,
    }


def turn_credit(episodes: Sequence[Episode], advantages: Tensor) -> dict[str, tuple[float, float]]:
    """How the advantage of one step's episodes spreads over their turns, as ``(numerator, denominator)``
    pairs (summed over ranks, then divided): ``env/adv_share_turn<k>`` for ``k = 1..max_turns`` and
    ``env/adv_share_final_turn``.

    Each sampled token of episode ``e`` carries the episode's advantage ``a_e``; the share of turn ``k`` is
    ``sum_e |a_e| n_ek / sum_e |a_e| n_e``, with ``n_ek`` the tokens the policy sampled in turn ``k`` of ``e``
    and ``n_e`` in all of its turns: the fraction of the step's advantage mass, token by token (the policy
    gradient's weight under ``token-mean`` aggregation, before clipping), that lands on turn ``k``. The final
    turn is each episode's last sampled turn (its answer, or the turn it was cut on). NaN when every advantage
    is 0. ``advantages``: ``[N]`` (or ``[P, G]``), one per episode, in the rollouts' row order.
    """
    a = advantages.detach().reshape(-1).abs().double().cpu().tolist()
    require(len(a) == len(episodes), f"turn_credit: {len(a)} advantages for {len(episodes)} episodes")
    most = max([e.max_turns for e in episodes] + [len(e.turn_tokens) for e in episodes] + [1])
    turn = [0.0] * most
    final = total = 0.0
    for e, weight in zip(episodes, a, strict=True):
        for k, tokens in enumerate(e.turn_tokens):
            turn[k] += weight * tokens
        final += weight * (e.turn_tokens[-1] if e.turn_tokens else 0)
        total += weight * sum(e.turn_tokens)
    pairs = {f"env/adv_share_turn{k + 1}": (mass, total) for k, mass in enumerate(turn)}
    pairs["env/adv_share_final_turn"] = (final, total)
    return pairs
