"""CompletionSamples: a few prompts, their completions and rewards as a table to every logger."""

from __future__ import annotations

import math
from typing import ClassVar

from lightning import Callback, LightningModule, Trainer

from lit_grpo.callbacks._logging import log_table
from lit_grpo.callbacks._requirements import require_logger
from lit_grpo.callbacks._rollouts import rollout_stats
from lit_grpo.callbacks._schedule import due_step
from lit_grpo.checks import require_at_least
from lit_grpo.types import RolloutStats

NAME = "CompletionSamples"


def _cell(text: str, max_chars: int) -> str:
    """Text fit for one markdown table cell."""
    text = text if len(text) <= max_chars else text[: max_chars - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "⏎").replace("`", "'") or " "


def _num(x: float) -> str:
    return "NaN" if math.isnan(x) else f"{x:.3g}"


def completion_text(stats: RolloutStats, i: int) -> str:
    """Completion ``i`` as shown: its text, or for a multi-turn episode every message from its first assistant
    turn on, each as ``[role] content`` (assistant turns, tool results, the environment's other answers)."""
    episodes = stats.rollouts.episodes if stats.rollouts is not None else None
    if episodes is None:
        return stats.texts[i]
    messages = episodes[i].messages
    first = next((k for k, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    return "\n".join(f"[{m['role']}] {m['content']}" for m in messages[first:])


#: the columns of the samples table (TensorBoard shows the same as markdown, a table per prompt)
COLUMNS = ("prompt_id", "prompt", "reference", "completion", "reward", "advantage", "tokens", "truncated")


def sample_rows(stats: RolloutStats, num_prompts: int, num_completions: int, max_chars: int) -> list[list]:
    """The rows of :data:`COLUMNS`: per shown prompt, its first ``num_completions`` completions (whole
    episodes, with roles), texts cut to ``max_chars``."""
    def cut(text: str) -> str:
        return text if len(text) <= max_chars else text[: max_chars - 1] + "…"

    G, rows = stats.group_size, []
    for p in range(min(num_prompts, len(stats.batch))):
        for j in range(min(num_completions, G)):
            i = p * G + j
            rows.append([stats.batch.ids[p], cut(stats.batch.prompts[p]), cut(stats.batch.references[p]),
                         cut(completion_text(stats, i)), float(stats.rewards[p, j]),
                         float(stats.advantages[p, j]), int(stats.lengths[i]), bool(stats.truncated[i])])
    return rows


def format_samples(stats: RolloutStats, num_prompts: int, num_completions: int, max_chars: int) -> str:
    """Markdown: per prompt its id, text and reference, then a table of completions (whole episodes, with
    roles) with reward, advantage, length and whether it was truncated."""
    G = stats.group_size
    parts = []
    for p in range(min(num_prompts, len(stats.batch))):
        rows = ["| # | completion | reward | advantage | tokens | truncated |", "|---|---|---|---|---|---|"]
        for j in range(min(num_completions, G)):
            i = p * G + j
            rows.append(
                f"| {j} | {_cell(completion_text(stats, i), max_chars)} | {_num(stats.rewards[p, j].item())} "
                f"| {_num(stats.advantages[p, j].item())} | {int(stats.lengths[i])} | "
                f"{'yes' if bool(stats.truncated[i]) else 'no'} |"
            )
        parts.append(
            f"**{_cell(stats.batch.ids[p], 80)}**: `{_cell(stats.batch.prompts[p], max_chars)}` "
            f"(reference `{_cell(stats.batch.references[p], max_chars)}`)\n\n" + "\n".join(rows)
        )
    return "\n\n".join(parts)


class CompletionSamples(Callback):
    """Writes a few of the step's prompts with their completions as a table, to whichever loggers run.

    Every ``every_n_steps`` (starting at step 0) the table ``samples/completions`` (TensorBoard: markdown
    text; W&B: a table; MLflow: a JSON table artifact; CSV: ``samples_completions.csv``): the first
    ``num_prompts`` prompts of the step (id, prompt, reference) each with a table of up to
    ``num_completions`` completions, their reward, advantage, token count and truncation. A multi-turn episode
    shows every message after the prompt with its role (``[assistant] ... ⏎ [tool] ...``). Writes no scalars.

    Args:
        every_n_steps: Cadence in training steps.
        num_prompts: Prompts shown.
        num_completions: Completions shown per prompt (at most the group size).
        max_chars: Longer texts are cut to this many characters.
    """

    #: Scalars it logs: none (a table only).
    metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, every_n_steps: int = 50, num_prompts: int = 2, num_completions: int = 4, max_chars: int = 500
    ) -> None:
        require_at_least(
            NAME, 1, every_n_steps=every_n_steps, num_prompts=num_prompts, num_completions=num_completions,
            max_chars=max_chars,
        )  # fmt: skip
        self.every_n_steps, self.num_prompts = every_n_steps, num_prompts
        self.num_completions, self.max_chars = num_completions, max_chars

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            require_logger(NAME, trainer)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        stats = rollout_stats(outputs)
        step = due_step(trainer, self.every_n_steps)
        if stats is None or step is None or not trainer.is_global_zero:
            return
        shown = (stats, self.num_prompts, self.num_completions, self.max_chars)
        log_table(trainer, "samples/completions", COLUMNS, sample_rows(*shown), step, format_samples(*shown))
