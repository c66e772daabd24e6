"""Questions about the invented facts of the shipped search collection, answered by exact match.

``assets/search_corpus/{train,val,test}.jsonl`` (written by ``scripts/make_search_corpus.py``) hold
``question``, ``answer`` and ``doc_id``; the splits share no document. Pair them with
:class:`~lit_grpo.envs.search.SearchEnvironment` and :class:`~lit_grpo.rewards.ExactMatch`.
"""

from __future__ import annotations

from lit_grpo.data.sources import FileSource
from lit_grpo.data.templates import PromptStyle


def _split_file(split: str) -> str:
    from lit_grpo.resources import asset

    return str(asset("search_corpus") / f"{split}.jsonl")


class SearchQuestions(FileSource):
    """Questions answerable only from the shipped document collection (840 train, 100 val, 500 test).

    Args:
        train: File of the training split (null: the shipped one).
        val: File of the validation split (null: the shipped one).
        test: File of the test split (null: the shipped one).
        extra_fields: Further fields passed along as ``PromptBatch.columns`` (e.g. ``doc_id``).
        style: Prompt style; episodes render their own messages, so keep ``plain`` there.
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: Appended to the question in the ``plain`` and ``chat`` styles.
    """

    def __init__(self, train: str | None = None, val: str | None = None, test: str | None = None,
                 extra_fields: list[str] | None = None, style: PromptStyle = "plain",
                 tokenizer: str | None = None, instruction: str = "") -> None:
        super().__init__(train=train or _split_file("train"), val=val or _split_file("val"),
                         test=test or _split_file("test"), prompt_field="question", answer_field="answer",
                         template="{question}",
                         extra_fields=extra_fields, style=style, tokenizer=tokenizer, instruction=instruction)
