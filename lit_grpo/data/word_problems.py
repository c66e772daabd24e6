"""One-step arithmetic word problems in plain English, generated from templates (a small GSM8K-like task).

"Mia has 23 marbles. She finds 15 more. How many marbles does Mia have now?" -> ``38``. Each problem
is one addition or subtraction, worded in one of a few ways, with a person, an object and two numbers
drawn from a seeded generator; the answer is a whole number, so :class:`~lit_grpo.rewards.LastNumber`
or :class:`~lit_grpo.rewards.MathVerify` score it. Splits are disjoint: problems are enumerated over
``(template, a, b)`` in one seeded order, val first, then test, then train.
"""

from __future__ import annotations

import torch

from lit_grpo.checks import require, require_at_least
from lit_grpo.data.records import Record
from lit_grpo.data.sources import Split, StyledSource, split_range
from lit_grpo.data.templates import PromptStyle, check_style

NAMES = ["Mia", "Leo", "Ava", "Sam", "Zoe", "Max", "Lily", "Ben", "Emma", "Noah", "Ruby", "Omar"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "shells", "pencils", "cards", "stamps", "cookies"]

#: kind -> templates: ``(question, answer(a, b))``; ``{n}`` a name, ``{x}`` an object, ``b <= a`` for "sub".
TEMPLATES = {
    "add": [
        ("{n} has {a} {x}. {n} gets {b} more {x}. How many {x} does {n} have now?", lambda a, b: a + b),
        ("There are {a} {x} in a box and {b} {x} on the table. How many {x} are there in total?",
         lambda a, b: a + b),
        ("{n} collected {a} {x} on Monday and {b} {x} on Tuesday. How many {x} did {n} collect?",
         lambda a, b: a + b),
    ],
    "sub": [
        ("{n} has {a} {x} and gives {b} of them to a friend. How many {x} does {n} have left?",
         lambda a, b: a - b),
        ("A shop had {a} {x}. It sold {b} {x}. How many {x} are left in the shop?", lambda a, b: a - b),
    ],
    "compare": [
        ("{n} has {a} {x} and a friend has {b} {x}. How many more {x} does {n} have than the friend?",
         lambda a, b: a - b),
    ],
}
KINDS = tuple(TEMPLATES)


class WordProblems(StyledSource):
    """One-step addition / subtraction word problems; the reference is the whole-number answer.

    Args:
        num_train: Training problems.
        num_val: Validation problems.
        num_test: Test problems.
        kinds: Comma-separated problem kinds among ``add``, ``sub``, ``compare``.
        max_number: Largest number in a problem (the difficulty knob; numbers start at 2).
        seed: Seed of the order of problems and of the names and objects.
        style: Prompt style.
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: Text appended to the question in the ``plain`` and ``chat`` styles.
    """

    def __init__(
        self,
        num_train: int = 5000,
        num_val: int = 500,
        num_test: int = 500,
        kinds: str = "add,sub,compare",
        max_number: int = 50,
        seed: int = 0,
        style: PromptStyle = "chat",
        tokenizer: str | None = None,
        instruction: str = "",
    ) -> None:
        check_style("WordProblems", style)
        chosen = [k.strip() for k in kinds.split(",") if k.strip()]
        require(bool(chosen) and not set(chosen) - set(KINDS),
                f"WordProblems: kinds={kinds!r} must be a comma-separated subset of {KINDS}")
        require(max_number >= 3, f"WordProblems: max_number={max_number} must be >= 3")
        require_at_least("WordProblems", 0, num_train=num_train, num_val=num_val, num_test=num_test)
        templates = [t for k in chosen for t in TEMPLATES[k]]
        space = len(templates) * (max_number - 1) ** 2
        require(num_train + num_val + num_test <= space,
                f"WordProblems: num_train + num_val + num_test = {num_train + num_val + num_test} exceeds "
                f"the {space} distinct problems of kinds={kinds!r}, max_number={max_number}; raise "
                "max_number")
        self.num_train, self.num_val, self.num_test = num_train, num_val, num_test
        self.kinds, self.max_number, self.seed = kinds, max_number, seed
        self.style, self.tokenizer, self.instruction = style, tokenizer, instruction
        self._templates = templates

    def load(self, split: Split) -> list[Record]:
        rows = split_range(split, self.num_val, self.num_test, self.num_train)
        m = self.max_number - 1  # numbers 2..max_number
        gen = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(len(self._templates) * m * m, generator=gen)[rows.start : rows.stop].tolist()
        seed = self.seed + rows.start
        names = torch.randint(len(NAMES), (len(order),), generator=torch.Generator().manual_seed(seed + 1))
        items = torch.randint(len(ITEMS), (len(order),), generator=torch.Generator().manual_seed(seed + 2))
        records = []
        for row, code in enumerate(order):
            template, answer = self._templates[code // (m * m)]
            a, b = code // m % m + 2, code % m + 2
            if answer(2, 1) == 1 and a <= b:  # a subtraction: the first number the larger
                a, b = b + 1, a
            text = template.format(n=NAMES[names[row]], x=ITEMS[items[row]], a=a, b=b)
            records.append({"prompt": self.render(text), "reference": str(answer(a, b)),
                            "id": f"{split}-{row}", "columns": {}})
        return records
