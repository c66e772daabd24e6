"""Small copies of the task datasets, in the layout and fields of their Hugging Face repositories.

Each writer creates a directory that ``datasets.load_dataset(<directory>, <config>)`` reads the way it
reads the hub repository, so the tasks load them with their real defaults and only ``path`` changed.
"""

import json
from pathlib import Path

import datasets

GSM8K_ROWS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 12 pens. How many pens are in 3 boxes?", "12 * 3 = 36\n#### 36"),
    ("Sara reads 10 pages a day. How many pages in 5 days?", "10 * 5 = 50\n#### 50"),
    ("A shop sold 1,200 cups and then 300 more. How many cups in total?", "1200 + 300 = 1500\n#### 1,500"),
    ("Ben had 9 coins and lost 2. How many are left?", "9 - 2 = 7\n#### 7"),
    ("Each of 6 kids gets 2 cookies. How many cookies?", "6 * 2 = 12\n#### 12"),
]
MATH_ROWS = [
    ("Compute $\\frac{1}{2} + \\frac{1}{4}$.", "We add: $\\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}"),
    ("What is $2^{10}$?", "$2^{10} = \\boxed{1024}$.", "1024"),
    ("Simplify $\\sqrt{18}$.", "$\\sqrt{18} = \\boxed{3\\sqrt{2}}$.", "3\\sqrt{2}"),
    ("Solve $x + 3 = 5$.", "So $x = \\boxed{2}$.", "2"),
    ("What is $7 \\times 8$?", "$\\boxed{56}$", "56"),
    ("Find $10 - 3$.", "$\\boxed{7}$", "7"),
]
AQUA_ROWS = [
    ("What is 5 + 6?", ["A)10", "B)11", "C)12", "D)13", "E)14"], "5 + 6 = 11", "B"),
    ("What is 9 - 4?", ["A)3", "B)4", "C)5", "D)6", "E)7"], "9 - 4 = 5", "C"),
    ("What is 3 * 3?", ["A)9", "B)6", "C)12", "D)3", "E)0"], "3 * 3 = 9", "A"),
    ("What is 8 / 2?", ["A)2", "B)3", "C)6", "D)4", "E)8"], "8 / 2 = 4", "D"),
    ("What is 7 + 7?", ["A)12", "B)13", "C)15", "D)16", "E)14"], "7 + 7 = 14", "E"),
    ("What is 1 + 1?", ["A)2", "B)1", "C)0", "D)3", "E)4"], "1 + 1 = 2", "A"),
]
POEMS = [
    ("Morning", "the sun comes up\nover the quiet hill"),
    ("Rain", "soft rain on the roof\nall night long"),
    ("Winter", "white snow on the field\nand cold bright air"),
    ("Sea", "the waves roll in\nand the gulls cry"),
    ("Forest", "tall trees stand still\nin the green shade"),
    ("Night", "stars over the town\nand a silver moon"),
]


def _readme(config: str, splits: list[str]) -> str:
    """The dataset card header by which the hub maps a config's files to splits."""
    files = "".join(f"  - split: {s}\n    path: {config}/{s}-*\n" for s in splits)
    return f"---\nconfigs:\n- config_name: {config}\n  data_files:\n{files}---\n"


def write_gsm8k(root: Path, rows=GSM8K_ROWS) -> str:
    """``openai/gsm8k``: ``main/{train,test}-00000-of-00001.parquet`` with question, answer."""
    (root / "main").mkdir(parents=True)
    table = [{"question": q, "answer": a} for q, a in rows]
    for split, part in [("train", table), ("test", table[:2])]:
        datasets.Dataset.from_list(part).to_parquet(str(root / "main" / f"{split}-00000-of-00001.parquet"))
    (root / "README.md").write_text(_readme("main", ["train", "test"]))
    return str(root)


def write_math500(root: Path, rows=MATH_ROWS) -> str:
    """``HuggingFaceH4/MATH-500``: ``test.jsonl`` with problem, solution, answer, subject, level, unique_id."""
    root.mkdir(parents=True)
    lines = [
        json.dumps({"problem": p, "solution": s, "answer": a, "subject": "Algebra", "level": 1 + i % 5,
                    "unique_id": f"test/algebra/{i}.json"})
        for i, (p, s, a) in enumerate(rows)
    ]  # fmt: skip
    (root / "test.jsonl").write_text("\n".join(lines) + "\n")
    return str(root)


def write_aqua(root: Path, rows=AQUA_ROWS) -> str:
    """``deepmind/aqua_rat`` (config ``raw``): question, options ``["A)..", ...]``, rationale, correct."""
    (root / "raw").mkdir(parents=True)
    table = [{"question": q, "options": o, "rationale": r, "correct": c} for q, o, r, c in rows]
    for split, part in [("train", table), ("validation", table[:2]), ("test", table[2:4])]:
        datasets.Dataset.from_list(part).to_parquet(str(root / "raw" / f"{split}-00000-of-00001.parquet"))
    (root / "README.md").write_text(_readme("raw", ["train", "validation", "test"]))
    return str(root)


def write_poetry(root: Path, rows=POEMS) -> str:
    """``merve/poetry``: ``poetry.csv`` with author, content, poem name, age, type."""
    root.mkdir(parents=True)
    table = [
        {"author": "Anon", "content": c, "poem name": t, "age": "Modern", "type": "Nature"} for t, c in rows
    ]
    datasets.Dataset.from_list(table).to_csv(str(root / "poetry.csv"), index=False)
    return str(root)


def offline_datasets(tmp_path: Path, monkeypatch) -> None:
    """No hub access, and a private datasets cache."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
