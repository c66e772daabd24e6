"""Synthetic tasks with difficulty controls: open-answer arithmetic, its residues (a bounded answer the
model computes) and multiple-choice arithmetic.

All enumerate every distinct problem ``(a, op, b)`` with ``a, b`` in ``0..max_operand`` and put them
in one seeded order; val takes the first ``num_val``, test the next ``num_test`` and train the next
``num_train``, so the splits are disjoint and the hold-out sets do not move when ``num_train`` changes.
"""

from __future__ import annotations

import operator
import string
from typing import Any

import numpy as np
import torch

from lit_grpo.checks import require, require_at_least
from lit_grpo.data.records import Record
from lit_grpo.data.sources import Split, StyledSource, split_range
from lit_grpo.data.templates import PromptStyle, check_style, format_options

_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _check_problem_space(owner: str, sizes: dict[str, int], max_operand: int, operators: str) -> None:
    require_at_least(owner, 0, **sizes, max_operand=max_operand)
    distinct = len(set(operators)) == len(operators)
    require(bool(operators) and not set(operators) - set(_OPERATORS) and distinct,
            f"{owner}: operators={operators!r} must be distinct characters from {''.join(_OPERATORS)!r}, "
            "e.g. '+' or '+-*'")
    space = len(operators) * (max_operand + 1) ** 2
    wanted = sum(sizes.values())
    terms = " + ".join(str(v) for v in sizes.values())
    require(wanted <= space,
            f"{owner}: num_train + num_val + num_test = {terms} "
            f"= {wanted} exceeds the {space} distinct problems with max_operand={max_operand} and "
            f"operators={operators!r}; raise max_operand, add operators or lower the split sizes")


def _drawn(seed: int, code: int, stream: int, low: int, high: int) -> int:
    """An integer in ``low..high`` drawn for problem ``code`` (``stream`` keeps a source's draws apart)."""
    return int(np.random.default_rng([seed, code, stream]).integers(low, high + 1))


def _mean_guess_rate(low: int, high: int) -> float:
    """Chance of a uniform guess among ``k`` answers, averaged over ``k`` in ``low..high``."""
    ks = range(low, high + 1)
    return sum(1.0 / k for k in ks) / len(ks)


def problems(rows: range, max_operand: int, operators: str, seed: int):
    """``(row, code, a, op, b)`` of the problems at ``rows`` of the seeded order (``code`` identifies the
    problem; ``row`` counts from 0)."""
    m = max_operand + 1
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(operators) * m * m, generator=gen)[rows.start : rows.stop]
    for row, code in enumerate(order.tolist()):
        yield row, code, code // m % m, operators[code // (m * m)], code % m


class SyntheticArithmetic(StyledSource):
    """Prompts ``"{a}{op}{b}="`` with ``a, b`` in ``0..max_operand``; the reference is the result.

    Default reward: :class:`~lit_grpo.rewards.ExactMatch` (plain/chat); with ``style: think`` the answer
    sits in an ``<answer>`` tag, which :class:`~lit_grpo.rewards.MathVerify` reads.

    Args:
        num_train: Training problems (the defaults use all 10000 problems of two-digit addition).
        num_val: Validation problems.
        num_test: Test problems.
        max_operand: Largest operand (the difficulty knob).
        operators: Operators to draw from, any of "+", "-", "*" (e.g. "+-").
        seed: Seed of the order of problems.
        style: Prompt style (``plain`` keeps the bare ``"12+30="``).
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: Text appended to the problem in the ``plain`` and ``chat`` styles.
        question: How a problem is written, with ``{a}``, ``{op}`` and ``{b}`` (e.g. ``"What is {a} {op}
            {b}?"`` for instruction-tuned models).
    """

    #: the fields a ``question`` is written with, those it must contain, and an example of one
    question_fields: tuple[str, ...] = ("a", "op", "b")
    required_fields: frozenset[str] = frozenset()
    question_example = "What is {a} {op} {b}?"

    def __init__(
        self,
        num_train: int = 9600,
        num_val: int = 200,
        num_test: int = 200,
        max_operand: int = 99,
        operators: str = "+",
        seed: int = 0,
        style: PromptStyle = "plain",
        tokenizer: str | None = None,
        instruction: str = "",
        question: str = "{a}{op}{b}=",
    ) -> None:
        sizes = {"num_train": num_train, "num_val": num_val, "num_test": num_test}
        _check_problem_space(type(self).__name__, sizes, max_operand, operators)
        check_style(type(self).__name__, style)
        self.num_train = num_train
        self.num_val = num_val
        self.num_test = num_test
        self.max_operand = max_operand
        self.operators = operators
        self.seed = seed
        self.style = style
        self.tokenizer = tokenizer
        self.instruction = instruction
        self.question = self._checked_question(question)

    def _checked_question(self, question: str) -> str:
        try:
            question.format(**{f: {"op": "+"}.get(f, 3) for f in self.question_fields})
            missing = self.required_fields - {field for _, field, _, _ in string.Formatter().parse(question)}
            require(not missing, "no " + ", ".join("{" + m + "}" for m in sorted(missing)))
        except (KeyError, IndexError, ValueError) as err:
            names = ", ".join("{" + f + "}" for f in self.question_fields)
            raise ValueError(
                f"{type(self).__name__}: question={question!r} is not a format string over {names} ({err}); "
                f"e.g. {self.question_example!r}"
            ) from None
        return question

    def load(self, split: Split) -> list[Record]:
        rows = split_range(split, self.num_val, self.num_test, self.num_train)
        records = []
        for row, code, a, op, b in problems(rows, self.max_operand, self.operators, self.seed):
            question, reference, columns = self.problem(code, a, op, b)
            records.append({"prompt": self.render(question), "reference": reference, "id": f"{split}-{row}",
                            "columns": columns})  # fmt: skip
        return records

    def problem(self, code: int, a: int, op: str, b: int) -> tuple[str, str, dict[str, Any]]:
        """The question, the reference and the columns of problem ``code`` (its operands and operator)."""
        return self.question.format(a=a, op=op, b=b), str(_OPERATORS[op](a, b)), {"a": a, "op": op, "b": b}

    def default_reward(self):
        """``ExactMatch()``; with ``style: think``, ``MathVerify()`` (which reads the ``<answer>`` tag)
        plus 0.1 × ``Format()``."""
        from lit_grpo.data.tasks import with_format_bonus
        from lit_grpo.rewards import ExactMatch, MathVerify

        return with_format_bonus(MathVerify(), "think") if self.style == "think" else ExactMatch()


class SyntheticResidue(SyntheticArithmetic):
    """Prompts ``"({a}{op}{b})%{k}="``: the result modulo ``k``, with ``k`` drawn per problem from
    ``min_modulus..max_modulus``; the reference is the residue ``0..k-1``.

    A bounded-answer task whose answer the policy computes rather than looks up: there are ``k``
    possible answers, so a policy that guesses among them is right ``1 / k`` of the time, while one that
    knows the sum is right more often. For ``k`` in {2, 5, 10} the residue of a sum depends only on the
    operands' last digits, so a policy that adds gets those right first. Records carry the column
    ``num_choices`` (the problem's ``k``), which :class:`~lit_grpo.callbacks.TestSplitReport` reads for
    ``test/chance`` and ``test/skill``. Over uniformly drawn problems the residues are close to uniform
    on ``0..k-1``, so a policy that always answers the same residue scores at most about chance. Default
    reward: :class:`~lit_grpo.rewards.ExactMatch` (as :class:`SyntheticArithmetic`).

    Args:
        min_modulus: Smallest ``k`` (at least 2).
        max_modulus: Largest ``k``.
        question: How a problem is written, with ``{a}``, ``{op}``, ``{b}`` and ``{k}``.
        **kwargs: :class:`SyntheticArithmetic`'s splits, operands, operators, seed (which also draws the
            moduli), style, tokenizer and instruction.
    """

    question_fields = ("a", "op", "b", "k")
    required_fields = frozenset({"k"})  # without it every k would read the same
    question_example = "({a}{op}{b})%{k}="

    def __init__(
        self, min_modulus: int = 2, max_modulus: int = 10, question: str = "({a}{op}{b})%{k}=", **kwargs
    ) -> None:
        super().__init__(question=question, **kwargs)
        require(2 <= min_modulus <= max_modulus,
                f"SyntheticResidue: min_modulus={min_modulus}, max_modulus={max_modulus} must satisfy "
                "2 <= min_modulus <= max_modulus")
        self.min_modulus = min_modulus
        self.max_modulus = max_modulus

    def modulus(self, code: int) -> int:
        """The modulus ``k`` of problem ``code`` (seeded per problem)."""
        return _drawn(self.seed, code, 2, self.min_modulus, self.max_modulus)

    @property
    def guess_rate(self) -> float:
        """Probability that a uniform guess among the ``k`` residues is right, averaged over ``k``."""
        return _mean_guess_rate(self.min_modulus, self.max_modulus)

    def problem(self, code: int, a: int, op: str, b: int) -> tuple[str, str, dict[str, Any]]:
        k = self.modulus(code)
        return self.question.format(a=a, op=op, b=b, k=k), str(_OPERATORS[op](a, b) % k), {"num_choices": k}


class SyntheticChoice(StyledSource):
    """Multiple-choice arithmetic: ``"12+30=?"`` with ``num_choices`` options, one correct; the
    reference is the correct option's letter.

    The bounded-answer case for studying SignBalance: the correct letter is uniform over the options,
    so a policy that guesses is right with probability :attr:`guess_rate` ``= 1 / num_choices``.
    Distractors are distinct integers within ``spread`` of the result (smaller spread: closer, harder
    distractors). With ``min_choices`` each problem has its own number of options ``k``, drawn
    uniformly from ``min_choices..num_choices`` (a guess is then right with probability ``1 / k`` of
    that problem). With ``balanced_holdout`` the validation and test splits place the correct option
    at each position equally often (for each ``k``, up to one), so a policy that always answers the
    same letter scores chance there and not the share of one letter in a random draw. Records carry
    the column ``num_choices`` (the problem's ``k``). Default reward:
    :class:`~lit_grpo.rewards.ChoiceLetter`.

    Args:
        num_train: Training problems.
        num_val: Validation problems.
        num_test: Test problems.
        num_choices: Options per problem, k (2..26).
        max_operand: Largest operand.
        operators: Operators to draw from, any of "+", "-", "*".
        spread: Distractors are drawn from ``result - spread .. result + spread``; needs
            ``2 * spread >= num_choices - 1``.
        seed: Seed of the order of problems, of the distractors and of the answer positions.
        style: Prompt style.
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: How to answer, appended in the ``plain`` and ``chat`` styles.
        min_choices: Fewest options of a problem (null: every problem has ``num_choices``).
        balanced_holdout: Balance the correct positions of the validation and test splits.
    """

    def __init__(
        self,
        num_train: int = 9600,
        num_val: int = 200,
        num_test: int = 200,
        num_choices: int = 4,
        max_operand: int = 99,
        operators: str = "+",
        spread: int = 10,
        seed: int = 0,
        style: PromptStyle = "plain",
        tokenizer: str | None = None,
        instruction: str = "Answer with the letter of the correct option.",
        min_choices: int | None = None,
        balanced_holdout: bool = False,
    ) -> None:
        sizes = {"num_train": num_train, "num_val": num_val, "num_test": num_test}
        _check_problem_space("SyntheticChoice", sizes, max_operand, operators)
        check_style("SyntheticChoice", style)
        require(2 <= num_choices <= 26, f"SyntheticChoice: num_choices={num_choices} must be in 2..26")
        require(min_choices is None or 2 <= min_choices <= num_choices,
                f"SyntheticChoice: min_choices={min_choices} must be in 2..num_choices={num_choices} "
                "(or null for a fixed number of options)")
        require(2 * spread >= num_choices - 1,
                f"SyntheticChoice: spread={spread} leaves fewer than num_choices - 1 = {num_choices - 1} "
                f"distinct distractors; raise spread to at least {(num_choices) // 2}")
        self.num_train = num_train
        self.num_val = num_val
        self.num_test = num_test
        self.num_choices = num_choices
        self.max_operand = max_operand
        self.operators = operators
        self.spread = spread
        self.seed = seed
        self.style = style
        self.tokenizer = tokenizer
        self.instruction = instruction
        self.min_choices = min_choices
        self.balanced_holdout = balanced_holdout

    @property
    def guess_rate(self) -> float:
        """Probability that a uniformly random letter is correct: ``1 / num_choices`` (with
        ``min_choices``, the mean of ``1 / k`` over the possible ``k``)."""
        if self.min_choices is None:
            return 1.0 / self.num_choices
        return _mean_guess_rate(self.min_choices, self.num_choices)

    def choices(self, code: int) -> int:
        """The number of options ``k`` of problem ``code`` (seeded per problem)."""
        if self.min_choices is None:
            return self.num_choices
        return _drawn(self.seed, code, 1, self.min_choices, self.num_choices)

    def options(self, code: int, result: int, answer: int | None = None) -> tuple[list[int], int]:
        """The option values of problem ``code`` and the index of the correct one (seeded per problem;
        ``answer`` places the correct one there instead)."""
        k = self.choices(code)
        rng = np.random.default_rng([self.seed, code])
        offsets = [d for d in range(-self.spread, self.spread + 1) if d != 0]
        values = [result + int(d) for d in rng.choice(offsets, k - 1, replace=False)]
        drawn = int(rng.integers(k))
        answer = drawn if answer is None else answer
        values.insert(answer, result)
        return values, answer

    def load(self, split: Split) -> list[Record]:
        rows = split_range(split, self.num_val, self.num_test, self.num_train)
        records = []
        placed: dict[int, int] = {}  # k -> problems of this split with k options so far (balanced_holdout)
        for row, code, a, op, b in problems(rows, self.max_operand, self.operators, self.seed):
            answer = None
            if self.balanced_holdout and split != "train":
                k = self.choices(code)
                answer = placed.get(k, 0) % k
                placed[k] = placed.get(k, 0) + 1
            values, answer = self.options(code, _OPERATORS[op](a, b), answer)
            question = f"{a}{op}{b}=?\n" + format_options([str(v) for v in values])
            records.append(
                {
                    "prompt": self.render(question),
                    "reference": string.ascii_uppercase[answer],
                    "id": f"{split}-{row}",
                    "columns": {"num_choices": len(values)},
                }
            )
        return records

    def default_reward(self):
        """``ChoiceLetter()`` (plus 0.1 × ``Format()`` with ``style: think``)."""
        from lit_grpo.data.tasks import with_format_bonus
        from lit_grpo.rewards import ChoiceLetter

        return with_format_bonus(ChoiceLetter(), self.style)
