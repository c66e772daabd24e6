"""Prompt sources, tasks and the DataModule that serves them."""

from lit_grpo.data.curriculum import PromptCurriculum
from lit_grpo.data.datamodule import PromptDataModule
from lit_grpo.data.mixture import MixedSource
from lit_grpo.data.multiple_choice import MultipleChoice
from lit_grpo.data.reasoning_gym import ReasoningGymScore, ReasoningGymSource  # noqa: F401 (extra: reasoning)
from lit_grpo.data.records import BadRowError
from lit_grpo.data.search_questions import SearchQuestions
from lit_grpo.data.sources import FileSource, HubSource, PromptSource, RowSource
from lit_grpo.data.stream import PromptStream
from lit_grpo.data.synthetic import SyntheticArithmetic, SyntheticChoice, SyntheticResidue
from lit_grpo.data.tasks import GSM8K, MATH500, ReferenceText
from lit_grpo.data.templates import THINK_TEMPLATE, PromptStyle
from lit_grpo.data.word_problems import WordProblems

__all__ = [
    "PromptSource", "RowSource", "FileSource", "HubSource", "MixedSource",
    "SyntheticArithmetic", "SyntheticChoice", "SyntheticResidue", "GSM8K", "MATH500", "MultipleChoice",
    "ReferenceText", "WordProblems", "SearchQuestions",
    "PromptDataModule", "PromptStream", "BadRowError", "PromptStyle", "THINK_TEMPLATE", "PromptCurriculum",
]  # fmt: skip
