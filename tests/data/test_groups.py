"""GroupDraw: a step's groups drawn, generated and scored, with the curriculum's skips and the refills; it is
given the engine, the scoring and the refill stream, and reads nothing else."""

import torch

from lit_grpo.data.curriculum import PromptCurriculum
from lit_grpo.data.groups import GroupDraw
from lit_grpo.perf import PhaseTimer
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, SamplingParams

G = 2


def _batch(ids):
    return PromptBatch([f"q{i}" for i in ids], [f"a{i}" for i in ids], [str(i) for i in ids])


class Engine:
    """One token per completion; the text is the prompt's id, so a test reads which prompts ran."""

    def __init__(self):
        self.calls = []

    def rollout(self, batch, group_size, sampling):
        self.calls.append(list(batch.ids))
        n = len(batch) * group_size
        ids = torch.ones(n, 1, dtype=torch.long)
        return Rollouts(ids, ids.bool(), ids, ids.bool(), torch.zeros(n, 1),
                        [i for i in batch.ids for _ in range(group_size)], torch.zeros(n, dtype=torch.bool),
                        group_size)

    def rollout_ahead(self, batch, group_size, sampling):
        return batch, self.rollout(batch, group_size, sampling)


def _score(varied):
    """Group of prompt ``i`` scores ``[0, 1]`` when ``i`` is in ``varied``, else ``[1, 1]``."""
    def score(batch, rollouts):
        rewards = torch.tensor([[0.0, 1.0] if int(i) in varied else [1.0, 1.0] for i in batch.ids])
        return rewards, RewardOutput(rewards.reshape(-1), {}, {"calls": 1})
    return score


class Refill:
    def __init__(self, start):
        self.next, self.asked = start, []

    def __call__(self, n):
        self.asked.append(n)
        ids = list(range(self.next, self.next + n))
        self.next += n
        return _batch(ids)


def _draw(draw, batch, engine, score, refill):
    return draw(batch, engine, score, refill, lambda n: n, 0, PhaseTimer())


def test_dynamic_sampling_refills_until_p_groups_vary():
    draw = GroupDraw(None, G, SamplingParams(), filter_degenerate=True, max_refill_batches=4)
    engine, refill = Engine(), Refill(start=10)
    groups = _draw(draw, _batch([0, 1, 2]), engine, _score({1, 10, 11, 12}), refill)
    assert groups.batch.ids == ["1", "10", "11"]  # the first P varied groups, in draw order
    assert engine.calls == [["0", "1", "2"], ["10", "11"]] and refill.asked == [2]
    assert groups.rewards.tolist() == [[0.0, 1.0]] * 3 and groups.rollouts.texts == ["1", "1", "10", "10",
                                                                                       "11", "11"]
    assert (groups.drawn, groups.tokens) == (5, 10)  # dropped groups count as drawn and generated
    assert groups.reward_out.counters == {"calls": 2}


def test_dynamic_sampling_stops_after_max_refill_batches():
    draw = GroupDraw(None, G, SamplingParams(), filter_degenerate=True, max_refill_batches=1)
    groups = _draw(draw, _batch([0, 1]), Engine(), _score({1}), Refill(start=10))
    assert groups.batch.ids == ["1"] and groups.drawn == 3  # one refill of one prompt, then stop


def test_retired_prompts_are_skipped_and_replaced_from_the_refill_stream():
    curriculum = PromptCurriculum(retire_above=1.0, min_visits=1)
    curriculum.observe([("0", 1.0), ("10", 1.0)])
    draw = GroupDraw(curriculum, G, SamplingParams(), filter_degenerate=False, max_refill_batches=4)
    engine, refill = Engine(), Refill(start=10)
    groups = _draw(draw, _batch([0, 1]), engine, _score({1, 11}), refill)
    assert engine.calls == [["1", "11"]] and refill.asked == [1, 1]
    assert groups.drawn == 4 and draw.skipped == 2
    assert draw.pairs(world_size=1) == {"rollout/retired_prompts": (2.0, 1.0),
                                        "rollout/skipped_prompts": (2.0, 1.0)}
    draw.observe(groups.batch, groups.rewards, gather=lambda visits: [visits])
    assert curriculum.rate("1") == 0.5 and curriculum.rate("11") == 0.5


def test_every_prompt_retired_trains_on_the_drawn_batch():
    curriculum = PromptCurriculum(retire_above=1.0, min_visits=1)
    curriculum.observe([("0", 1.0), ("10", 1.0)])
    draw = GroupDraw(curriculum, G, SamplingParams(), filter_degenerate=False, max_refill_batches=1)
    groups = _draw(draw, _batch([0]), Engine(), _score(set()), Refill(start=10))
    assert groups.batch.ids == ["0"]


def test_without_a_curriculum_there_are_no_curriculum_metrics():
    assert GroupDraw(None, G, SamplingParams(), False, 4).pairs(world_size=2) == {}
