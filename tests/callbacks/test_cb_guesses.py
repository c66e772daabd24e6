"""SearchGuesses on scripted steps: per-episode answer sources read from real SearchEnvironment episodes."""

import importlib.util
import json
from types import SimpleNamespace

import pytest

from lit_grpo.callbacks import SearchGuesses
from lit_grpo.envs.base import Episode
from lit_grpo.resources import asset
from tests.callbacks.scripted import advance, scripted_trainer, step_outputs

needs_bm25s = pytest.mark.skipif(importlib.util.find_spec("bm25s") is None, reason="needs bm25s (the agents extra)")


def _record(row: dict) -> dict:
    return {"prompt": row["question"], "reference": row["answer"], "id": row["question"],
            "columns": {"doc_id": row["doc_id"]}}


def _play(env, record: dict, turns: list[str]) -> Episode:
    """One episode with scripted assistant turns, as the driver plays it (turn appended, then the step)."""
    episode = env.reset(record)
    for text in turns:
        episode.messages.append({"role": "assistant", "content": text})
        result = env.step(episode, text)
        episode.messages.extend(result.observations)
        if result.done:
            break
    return episode


def _call(query: str) -> str:
    return "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": query}}) + "</tool_call>"


def _module(trainer):
    return SimpleNamespace(trainer=trainer, engine=object())


def _outputs(episodes, rewards, advantages):
    out = step_outputs(rewards, advantages)
    out["rollout"].rollouts = SimpleNamespace(episodes=episodes)
    return out


@needs_bm25s
def test_sources_of_real_search_episodes():
    from lit_grpo.envs.search import SearchEnvironment

    env = SearchEnvironment(k=2, max_doc_chars=300)
    row = json.loads((asset("search_corpus") / "train.jsonl").read_text().splitlines()[0])
    record, answer = _record(row), row["answer"]
    found = _play(env, record, [_call(row["question"]), answer])  # the question itself retrieves its document
    assert f"[{row['doc_id']}]" in found.messages[-2]["content"]
    no_search = _play(env, record, [answer])
    missed = _play(env, record, [_call("kites company headquarters"), answer])  # a query about other documents
    assert f"[{row['doc_id']}]" not in missed.messages[-2]["content"] and missed.tool_calls == 1
    wrong = _play(env, record, [_call(row["question"]), "no idea"])
    episodes = [found, no_search, missed, wrong]
    rewards = [[1.0, 1.0, 1.0, 0.0]]
    advantages = [[0.25, 0.25, 0.25, -0.75]]
    trainer = scripted_trainer()
    SearchGuesses().on_train_batch_end(trainer, _module(trainer), _outputs(episodes, rewards, advantages), None, 0)
    logged = {k: v[-1][1] for k, v in trainer.loggers[0].metrics.items()}
    assert logged["episode/found_frac"] == pytest.approx(1 / 4)
    assert logged["episode/guess_no_search_frac"] == pytest.approx(1 / 4)
    assert logged["episode/guess_not_returned_frac"] == pytest.approx(1 / 4)
    assert logged["episode/guess_frac"] == pytest.approx(2 / 4)
    assert logged["episode/guess_share_of_correct"] == pytest.approx(2 / 3)
    assert logged["episode/doc_returned_frac"] == pytest.approx(2 / 4)  # the wrong answer's search returned it
    assert logged["episode/guess_advantage_mean"] == pytest.approx(0.25)


def _episode(doc_id="doc-000", columns=None, reward_turns=("x",)):
    record = {"prompt": "q", "reference": "a", "id": "p0",
              "columns": {"doc_id": doc_id} if columns is None else columns}
    messages = [{"role": "user", "content": "q"}] + [{"role": "assistant", "content": t} for t in reward_turns]
    return Episode(record=record, messages=messages)


def test_a_step_without_a_correct_answer_leaves_the_shares_of_correct_out():
    trainer = scripted_trainer()
    cb = SearchGuesses()
    for _ in range(2):
        cb.on_train_batch_end(trainer, _module(trainer), _outputs([_episode(), _episode()], [[0.0, float("nan")]],
                                                                   [[0.0, 0.0]]), None, 0)
        advance(trainer)
    logged = trainer.loggers[0].metrics
    assert logged["episode/guess_frac"] == [(0, 0.0), (1, 0.0)]  # an unscorable episode counts as wrong
    assert "episode/guess_share_of_correct" not in logged and "episode/guess_advantage_mean" not in logged


def test_records_without_the_document_column_are_refused_with_the_fix():
    trainer = scripted_trainer()
    with pytest.raises(ValueError, match=r"no 'doc_id' column.*extra_fields=\[doc_id\]"):
        SearchGuesses().on_train_batch_end(trainer, _module(trainer),
                                           _outputs([_episode(columns={})], [[1.0]], [[0.0]]), None, 0)


def test_single_turn_rollouts_are_refused():
    trainer = scripted_trainer()
    out = step_outputs([[1.0, 0.0]], [[0.5, -0.5]])
    out["rollout"].rollouts = SimpleNamespace(episodes=None)
    with pytest.raises(ValueError, match="EpisodeEngine"):
        SearchGuesses().on_train_batch_end(trainer, _module(trainer), out, None, 0)


def test_episodes_must_match_the_rewards():
    trainer = scripted_trainer()
    with pytest.raises(ValueError, match="1 episodes for 2 rewards"):
        SearchGuesses().on_train_batch_end(trainer, _module(trainer),
                                           _outputs([_episode()], [[1.0, 0.0]], [[0.5, -0.5]]), None, 0)


def test_correct_at_sets_the_threshold():
    trainer = scripted_trainer()
    SearchGuesses(correct_at=0.5).on_train_batch_end(
        trainer, _module(trainer), _outputs([_episode()], [[0.5]], [[0.0]]), None, 0)
    assert trainer.loggers[0].metrics["episode/guess_no_search_frac"] == [(0, 1.0)]
