"""reasoning-gym as a prompt source: its procedural task generators and their own verifiers.

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ (the optional extra
``pip install 'lit-grpo[reasoning]'``) has 100+ generators (``chain_sum``, ``basic_arithmetic``,
``spell_backward``, ...), each with a config dataclass of difficulty knobs and a ``score_answer(answer,
entry)`` in [0, 1]. :class:`ReasoningGymSource` turns one generator into train / val / test records, and
:class:`ReasoningGymScore` scores completions with that generator's ``score_answer``.

Splits. A generator draws item ``i`` of a dataset with seed ``s`` from ``Random(s + i)`` (almost all of them),
so the datasets of seeds ``s`` and ``s + 1`` share all but one item: splits from "seed, seed+1, seed+2" would
overlap. The source builds one dataset of ``num_val + num_test + num_train`` items with ``seed`` and gives val
the first ``num_val`` indices, test the next ``num_test`` and train the rest (as
:mod:`lit_grpo.data.synthetic` does), so the splits are disjoint items and the hold-out sets do not move when
``num_train`` changes. A generator with a small problem space can still draw the same question at two indices;
train drops any question that val or test holds.

Records carry the columns the reward needs: ``rg_source`` (a JSON string of the dataset name, config, seed and
size: enough to rebuild the generator), ``rg_index`` (the item's index in it), ``rg_entry`` (the entry:
question, answer and metadata, as JSON; tuples become lists, other values their ``repr``) and ``rg_exact``
(whether that JSON rebuilds the entry exactly). The reward rebuilds the entry from the columns when
``rg_exact``, and otherwise regenerates it by index (deterministic; most generators record tuples in their
metadata, so most regenerate).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import logging
import math
from dataclasses import fields
from functools import lru_cache
from typing import Any, Literal

from lit_grpo.checks import require
from lit_grpo.data.records import Record
from lit_grpo.data.sources import Split, StyledSource, split_range
from lit_grpo.data.templates import PromptStyle, check_style
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.pool import PooledScorer, StartMethod
from lit_grpo.rewards.scoring import Counted, Unscorable, score_items
from lit_grpo.types import RewardOutput

logger = logging.getLogger(__name__)

#: the optional extra this module's classes need (lit_grpo.extras)
EXTRA = "reasoning"
INSTALL = "pip install 'lit-grpo[reasoning]'"
#: The answer instruction: reasoning-gym's ``SYSTEM_PROMPTS["default"]`` (``reasoning_gym.utils``), which its
#: tasks are written for ("when an example is provided, follow the format of the output in that example").
DEFAULT_INSTRUCTION = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear and specific "
    "manner.\nOnce you have thought about the reasoning process, provide the answer in the following "
    "format:\n<answer>answer here</answer>\nDo not explain your reasoning inside the answer tags, provide "
    "only the final answer. When an example is provided, you should strictly follow the format of the "
    "output/answer in that example."
)
#: The columns a record carries for :class:`ReasoningGymScore`.
COLUMNS = ("rg_source", "rg_index", "rg_entry", "rg_exact")
AnswerFormat = Literal["tag", "line", "full", "last_number"]
_FORMATS = ("tag", "line", "full", "last_number")


def reasoning_gym(owner: str = "ReasoningGymSource"):
    """The ``reasoning_gym`` module, or an ImportError naming the extra that installs it."""
    try:
        return importlib.import_module("reasoning_gym")
    except ImportError as err:
        raise ImportError(
            f"{owner} needs the reasoning-gym package, which is not installed: {INSTALL} "
            "(or pip install 'reasoning-gym>=0.1.25')"
        ) from err


def _registry(owner: str) -> dict[str, tuple[type, type]]:
    """reasoning-gym's datasets: name -> (dataset class, config dataclass)."""
    reasoning_gym(owner)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def check_dataset(name: str, config: dict[str, Any], owner: str = "ReasoningGymSource") -> None:
    """Checks ``name`` against reasoning-gym's registry and ``config`` against that generator's config
    dataclass (its fields and its own ``validate``); errors name the dataset, close names and the fix."""
    datasets = _registry(owner)
    close = [] if name in datasets else difflib.get_close_matches(str(name), list(datasets), n=5, cutoff=0.5)
    hint = f"close names: {', '.join(close)}" if close else "no close name"
    require(name in datasets,
            f"{owner}: dataset={name!r} is not a reasoning-gym dataset ({hint}). Set dataset to one of the "
            f"{len(datasets)} names in reasoning_gym.factory.DATASETS, e.g. 'chain_sum' or "
            "'basic_arithmetic'")
    config_cls = datasets[name][1]
    known = [f.name for f in fields(config_cls) if f.name not in ("seed", "size")]
    for key in config:
        require(key not in ("seed", "size"),
                f"{owner}: config of {name!r} sets {key!r}, which the source derives; use the source's "
                "options seed and num_train / num_val / num_test instead")
        close = [] if key in known else difflib.get_close_matches(str(key), known, n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        require(key in known, f"{owner}: config key {key!r} is not an option of reasoning-gym dataset "
                f"{name!r}{hint}; its options are {', '.join(known)}")
    try:
        built = config_cls(**config)
        if hasattr(built, "validate"):
            built.validate()
    except (AssertionError, TypeError, ValueError) as err:
        raise ValueError(
            f"{owner}: config {config!r} of reasoning-gym dataset {name!r} is invalid: "
            f"{type(err).__name__}: {err}"
        ) from err


@lru_cache(maxsize=64)
def dataset_of(source: str):
    """The generator an ``rg_source`` JSON string describes (cached: a run's completions all share it)."""
    spec = json.loads(source)
    rg = reasoning_gym("ReasoningGymScore")
    return rg.create_dataset(spec["dataset"], seed=spec["seed"], size=spec["size"], **spec["config"])


@lru_cache(maxsize=4096)
def regenerated_entry(source: str, index: int) -> dict[str, Any]:
    """Item ``index`` of the generator of ``source``, generated again (the group of a prompt shares it)."""
    return dataset_of(source)[index]


def _json_safe(value: Any) -> Any:
    """``value`` with tuples as lists, mapping keys as text and any other non-JSON value as its ``repr``."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return repr(value)


def entry_columns(entry: dict[str, Any]) -> tuple[str, bool]:
    """``(rg_entry, rg_exact)``: the entry as JSON, and whether that JSON rebuilds it exactly."""
    text = json.dumps(_json_safe(entry), sort_keys=True)
    try:
        exact = json.loads(text) == entry  # a tuple (== no list), a set or an object: not exact
    except Exception:  # an object whose __eq__ raises
        exact = False
    return text, bool(exact)


class ReasoningGymSource(StyledSource):
    """Prompts from one reasoning-gym generator; its own ``score_answer`` is the reward
    (:class:`ReasoningGymScore`).

    The splits are disjoint index ranges of one dataset built with ``seed`` (see the module docstring): val
    the first ``num_val`` items, test the next ``num_test``, train the next ``num_train`` (less any question
    val or test holds). The dataset name and the config are checked when the source is built (when
    reasoning-gym is installed; otherwise :meth:`load` raises, naming ``pip install 'lit-grpo[reasoning]'``).

    Args:
        dataset: reasoning-gym dataset name, e.g. ``"chain_sum"`` (see ``reasoning_gym.factory.DATASETS``).
        config: The generator's options (fields of its config dataclass), e.g. ``{"min_terms": 2, "max_terms":
            2, "max_digits": 1}``; ``seed`` and ``size`` are the source's.
        num_train: Training items.
        num_val: Validation items.
        num_test: Test items.
        seed: Seed of the dataset.
        style: Prompt style (``chat`` for instruction-tuned models).
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: Appended to the question in the ``plain`` and ``chat`` styles; the default is
            reasoning-gym's own prompt asking for ``<answer>answer here</answer>`` (``think`` asks for the tag
            itself).
    """

    def __init__(
        self,
        dataset: str,
        config: dict[str, Any] | None = None,
        num_train: int = 1000,
        num_val: int = 100,
        num_test: int = 100,
        seed: int = 0,
        style: PromptStyle = "chat",
        tokenizer: str | None = None,
        instruction: str = DEFAULT_INSTRUCTION,
    ) -> None:
        owner = type(self).__name__
        check_style(owner, style)
        for option, value in (("num_train", num_train), ("num_val", num_val), ("num_test", num_test)):
            require(isinstance(value, int) and value >= 0, f"{owner}: {option}={value!r} must be an integer "
                                                           ">= 0")
        require(num_train + num_val + num_test > 0,
                f"{owner}: num_train, num_val and num_test are all 0; set num_train > 0")
        require(isinstance(seed, int) and seed >= 0, f"{owner}: seed={seed!r} must be an integer >= 0")
        config = dict(config or {})
        if importlib.util.find_spec("reasoning_gym") is not None:
            check_dataset(dataset, config, owner)  # cheap: no item is generated
        self.dataset = dataset
        self.config = config
        self.num_train = num_train
        self.num_val = num_val
        self.num_test = num_test
        self.seed = seed
        self.style = style
        self.tokenizer = tokenizer
        self.instruction = instruction

    @property
    def size(self) -> int:
        """Items of the one dataset the splits are cut from."""
        return self.num_val + self.num_test + self.num_train

    @property
    def source_key(self) -> str:
        """The ``rg_source`` column: what rebuilds the generator (dataset, config, seed, size) as JSON."""
        spec = {"dataset": self.dataset, "config": self.config, "seed": self.seed, "size": self.size}
        return json.dumps(spec, sort_keys=True)

    def indices(self, split: Split) -> range:
        """The dataset indices of ``split``."""
        return split_range(split, self.num_val, self.num_test, self.num_train)

    def load(self, split: Split) -> list[Record]:
        check_dataset(self.dataset, self.config, type(self).__name__)
        source = self.source_key
        data = dataset_of(source)
        held: set[str] = set()
        if split == "train":
            held = {data[i]["question"] for s in ("val", "test") for i in self.indices(s)}
        records, dropped = [], 0
        for row, index in enumerate(self.indices(split)):
            entry = data[index]
            if entry["question"] in held:
                dropped += 1
                continue
            text, exact = entry_columns(entry)
            columns = {"rg_source": source, "rg_index": index, "rg_entry": text, "rg_exact": exact}
            records.append({"prompt": self.render(entry["question"]), "reference": str(entry["answer"]),
                            "id": f"{split}-{row}", "columns": columns})  # fmt: skip
        if dropped:
            logger.warning(
                "%s(%r): dropped %d of %d training items whose question val or test also holds (a small "
                "problem space; raise the difficulty or lower num_val / num_test to keep them)",
                type(self).__name__, self.dataset, dropped, self.num_train,
            )  # fmt: skip
        return records

    def default_reward(self):
        """``ReasoningGymScore()`` (reads the ``<answer>`` tag, as the prompts ask)."""
        return ReasoningGymScore()


class ReasoningGymScore(PooledScorer, RewardFunction):
    """The generator's own ``score_answer(answer, entry)`` of records from :class:`ReasoningGymSource`.

    The answer is what ``answer_format`` reads: ``tag``, the last ``<answer>...</answer>``, stripped, as
    reasoning-gym's ``utils.extract_answer`` reads it (no tag scores 0, counted in ``no_answer``); ``line``,
    the first line; ``full``, the whole completion (models that answer bare); ``last_number``, the last number
    written, as :class:`~lit_grpo.rewards.LastNumber` reads it (numeric tasks, small models that answer in
    prose). The entry is rebuilt from the record's columns or regenerated by index (module docstring); a
    regenerated answer that differs from the record's reference is an error (a generator that is not
    deterministic). Scores are in [0, 1] (some generators give partial credit), so the reward is binary only
    with ``partial_credit`` off.

    Guarding is the project's: an item whose scoring raises is NaN, counted in ``errors``
    (:func:`score_items`); every call runs under the run's :class:`~lit_grpo.rewards.RewardGuard` time limit;
    with ``workers > 0`` a :class:`~lit_grpo.rewards.ScoringPool` scores the items, each within ``timeout_s``
    (a hung generator is killed, counted in ``timeouts``).

    Args:
        answer_format: ``tag`` (the last ``<answer>`` tag), ``line`` (the first line), ``full`` or
            ``last_number``.
        workers: Worker processes scoring the items (0: score in the calling process).
        timeout_s: Wall-clock limit of one item in a worker, in seconds.
        start_method: How workers start: ``forkserver`` or ``spawn``.
        partial_credit: Keep the generator's scores below 1 (partial credit); false: a score below 1 is 0, so
            the reward is binary (solved or not), as the estimators and diagnostics built for 0/1 rewards
            need.
    """

    binary = None

    def __init__(
        self,
        answer_format: AnswerFormat = "tag",
        workers: int = 0,
        timeout_s: float = 10.0,
        start_method: StartMethod = "forkserver",
        partial_credit: bool = True,
    ) -> None:
        require(answer_format in _FORMATS,
                f"ReasoningGymScore: answer_format={answer_format!r}; use one of {_FORMATS}")
        require(isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf,
                f"ReasoningGymScore: timeout_s={timeout_s!r} must be a number of seconds > 0")
        self.check_pool(workers, start_method)
        self.answer_format = answer_format
        self.timeout_s = timeout_s
        self.partial_credit = partial_credit
        self.binary = None if partial_credit else True

    def answer(self, completion: str) -> str | None:
        """The answer the generator scores, or None when the completion gives none."""
        if self.answer_format == "tag":
            from reasoning_gym.utils import extract_answer

            return extract_answer(completion)
        if self.answer_format == "last_number":
            from lit_grpo.rewards.last_number import last_number

            return last_number(completion)
        text = completion.split("\n", 1)[0] if self.answer_format == "line" else completion
        return text.strip() or None

    def entry(self, reference: str, rg_source: str, rg_index: int, rg_entry: str, rg_exact: bool) -> dict:
        """The entry ``score_answer`` reads: from the columns where they rebuild it exactly, else anew."""
        entry = json.loads(rg_entry) if rg_exact else regenerated_entry(rg_source, int(rg_index))
        require(str(entry["answer"]) == reference,
                f"item {rg_index} of {rg_source} regenerated with answer {entry['answer']!r}, not the "
                f"record's reference {reference!r}: the generator is not deterministic")
        return entry

    def score_item(self, completion: str, reference: str | None, **row: Any) -> float | Counted:
        """One item: the generator's score, ``Counted(0.0, "no_answer")`` without an answer, or raises."""
        if reference is None:
            raise Unscorable("unscorable", "no reference")
        answer = self.answer(completion)
        if answer is None:
            return Counted(0.0, "no_answer")
        entry = self.entry(reference, **{k: row[k] for k in COLUMNS})
        score = float(dataset_of(row["rg_source"]).score_answer(answer, entry))
        return score if self.partial_credit or score != score else float(score == 1.0)  # score != score: NaN

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` and ``rg_*`` columns -> scores ``[N]`` in [0, 1]."""
        missing = [c for c in COLUMNS if c not in columns]
        require(not missing,
                f"ReasoningGymScore needs the columns {', '.join(COLUMNS)} that ReasoningGymSource records "
                f"carry; missing {', '.join(missing)} (got {', '.join(columns) or 'none'}): use it with "
                "ReasoningGymSource")
        reasoning_gym("ReasoningGymScore")
        row_columns = {k: columns[k] for k in COLUMNS}
        return score_items(self.score_item, completions, references, name=self.name, columns=row_columns,
                           counter_keys=("no_answer",), pool=self.pool)  # fmt: skip
