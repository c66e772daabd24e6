"""SearchGuesses: how many of a search agent's correct answers were guesses, and what advantage they got."""

from __future__ import annotations

from typing import ClassVar, get_args

import torch
from lightning import LightningModule, Trainer

from lit_grpo.callbacks._logging import log_step
from lit_grpo.callbacks._requirements import require_run
from lit_grpo.callbacks._rollouts import RolloutStatsCallback, gather
from lit_grpo.checks import require
from lit_grpo.diagnostics.guesses import DOC_FIELD, Source, answer_source, guess_summary, returned_document
from lit_grpo.types import RolloutStats

NAME = "SearchGuesses"
SOURCES: tuple[Source, ...] = get_args(Source)


class SearchGuesses(RolloutStatsCallback):
    """Per training step, the sources of the episodes' answers (``lit_grpo.diagnostics.guesses``): a correct
    answer is found when an observation of its episode showed the document that answers the question (the
    record's ``doc_field`` column), else a guess, with no search (``no_search``) or after searches that did
    not return it (``not_returned``); with the mean advantage each kind was given (SignBalance's "spurious
    advantage"). Needs episodes (an ``EpisodeEngine``) and records that carry the column: for
    ``SearchQuestions``, ``extra_fields: [doc_id]``. An episode is correct when its reward is at least
    ``correct_at`` (unscorable: wrong). Writes the scalars in ``metrics`` every logged step; a share of
    nothing (no correct episode, no guess) is left out.

    Args:
        doc_field: The record column holding the answering document's id.
        correct_at: The reward at or above which an episode is correct.
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "episode/guess_frac",
        "episode/guess_no_search_frac",
        "episode/guess_not_returned_frac",
        "episode/found_frac",
        "episode/doc_returned_frac",
        "episode/guess_share_of_correct",
        "episode/guess_advantage_mean",
        "episode/found_advantage_mean",
    )

    def __init__(self, doc_field: str = DOC_FIELD, correct_at: float = 1.0) -> None:
        require(bool(doc_field), f"{NAME}: doc_field must name a record column, e.g. {DOC_FIELD!r}")
        self.doc_field, self.correct_at = doc_field, correct_at

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            require_run(NAME, trainer, pl_module, "engine")

    def on_rollout_stats(self, trainer: Trainer, pl_module: LightningModule, stats: RolloutStats) -> None:
        episodes = stats.rollouts.episodes if stats.rollouts is not None else None
        require(episodes is not None,
                f"{NAME} reads episodes, but the step's rollouts have none: use model.engine: "
                "lit_grpo.envs.EpisodeEngine (a search environment), or remove the callback")
        rewards, advantages = stats.rewards.flatten(), stats.advantages.flatten()
        require(len(episodes) == rewards.numel(),
                f"{NAME}: {len(episodes)} episodes for {rewards.numel()} rewards; the callback needs every "
                "sampled episode scored (no filter_degenerate)")
        rows = []
        for episode, reward, advantage in zip(episodes, rewards.tolist(), advantages.tolist(), strict=True):
            columns = episode.record.get("columns") or {}
            require(
                self.doc_field in columns,
                f"{NAME}: the record {episode.record.get('id')!r} has no {self.doc_field!r} column (it has "
                f"{sorted(columns)}); give the data source extra_fields: [{self.doc_field}] "
                f"(SearchQuestions: --data.source.init_args.extra_fields=[{self.doc_field}])",
            )
            doc_id = str(columns[self.doc_field])
            correct = reward == reward and reward >= self.correct_at  # NaN (unscorable) is wrong
            source = answer_source(episode.messages, episode.tool_calls, correct, doc_id)
            rows.append(
                [SOURCES.index(source), float(returned_document(episode.messages, doc_id)), advantage]
            )
        table = gather(pl_module, torch.tensor(rows, dtype=torch.float64).reshape(-1, 3))
        sources = [SOURCES[int(i)] for i in table[:, 0].tolist()]
        log_step(trainer, guess_summary(sources, (table[:, 1] > 0).tolist(), table[:, 2].tolist()))
