"""Writes the search agent's document collection and questions: assets/search_corpus/*.jsonl.

Every fact is about an invented town, person or company, so a question is answerable only from the documents
(no model has seen them). Names are made from syllables and checked unique; every answer is one short string
for exact match (a year, a name, a word or two). Deterministic: the same seed writes the same files.

    python scripts/make_search_corpus.py            # writes assets/search_corpus/
    python scripts/make_search_corpus.py --check    # fails if the committed files differ from a fresh run

Files: ``documents.jsonl`` (``id``, ``title``, ``text``) and ``train.jsonl`` / ``val.jsonl`` / ``test.jsonl``
(``question``, ``answer``, ``doc_id``), the questions split by document, so no held-out question asks about a
document a training question asks about.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "assets" / "search_corpus"
ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "st", "th",
          "tr", "vl", "sk", "qu"]
VOWELS = ["a", "e", "i", "o", "u", "ae", "io", "ou"]
CODAS = ["", "", "n", "r", "l", "s", "th", "nd", "rk", "m", "x"]
EXPORTS = ["copper wire", "salt", "wool", "glass beads", "timber", "paper", "rope", "clay pots", "honey", "tin",
           "dyed cloth", "cheese", "barley", "slate", "amber", "cider"]
PROFESSIONS = ["cartographer", "botanist", "clockmaker", "astronomer", "bridge engineer", "glassblower",
               "linguist", "beekeeper", "composer", "shipwright", "chemist", "weaver"]
PRODUCTS = ["lanterns", "bicycles", "compasses", "typewriters", "kites", "telescopes", "umbrellas", "pianos",
            "sewing machines", "barometers", "fountain pens", "sailcloth"]
COLOURS = ["red", "blue", "green", "yellow", "white", "black", "orange", "purple"]


def make_name(rng: random.Random, used: set[str], syllables: tuple[int, int] = (2, 3)) -> str:
    while True:
        name = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                       for _ in range(rng.randint(*syllables))).capitalize()
        if name not in used and 4 <= len(name) <= 12:
            used.add(name)
            return name


def towns(rng: random.Random, used: set[str], count: int) -> list[dict]:
    out = []
    for _ in range(count):
        name, river, founder = make_name(rng, used), make_name(rng, used), make_name(rng, used)
        year, export = rng.randint(1200, 1950), rng.choice(EXPORTS)
        out.append({"title": name, "facts": [
            (f"{name} is a town on the river {river}.", f"On which river is the town of {name}?", river),
            (f"It was founded in {year} by {founder}.", f"In which year was the town of {name} founded?", str(year)),
            (f"{founder} founded it.", f"Who founded the town of {name}?", founder),
            (f"The main export of {name} is {export}.", f"What is the main export of the town of {name}?", export),
        ]})
    return out


def people(rng: random.Random, used: set[str], count: int, town_names: list[str]) -> list[dict]:
    out = []
    for _ in range(count):
        first, last = make_name(rng, used, (1, 2)), make_name(rng, used)
        name, job, born = f"{first} {last}", rng.choice(PROFESSIONS), rng.randint(1700, 1990)
        home, colour = rng.choice(town_names), rng.choice(COLOURS)
        out.append({"title": name, "facts": [
            (f"{name} was a {job}.", f"What was the profession of {name}?", job),
            (f"{last} was born in {born}", f"In which year was {name} born?", str(born)),
            (f"in the town of {home}.", f"In which town was {name} born?", home),
            (f"{last}'s favourite colour was {colour}.", f"What was the favourite colour of {name}?", colour),
        ]})
    return out


def companies(rng: random.Random, used: set[str], count: int, town_names: list[str]) -> list[dict]:
    out = []
    for _ in range(count):
        name = f"{make_name(rng, used)} Works"
        product, year, seat = rng.choice(PRODUCTS), rng.randint(1800, 2000), rng.choice(town_names)
        staff = rng.randint(12, 4000)
        out.append({"title": name, "facts": [
            (f"{name} is a company that makes {product}.", f"What does {name} make?", product),
            (f"It was established in {year}", f"In which year was {name} established?", str(year)),
            (f"and has its headquarters in {seat}.", f"Where are the headquarters of {name}?", seat),
            (f"It employs {staff} people.", f"How many people does {name} employ?", str(staff)),
        ]})
    return out


def build(seed: int = 0) -> tuple[list[dict], dict[str, list[dict]]]:
    rng, used = random.Random(seed), set()
    town_docs = towns(rng, used, 140)
    town_names = [d["title"] for d in town_docs]
    entities = town_docs + people(rng, used, 140, town_names) + companies(rng, used, 80, town_names)
    rng.shuffle(entities)
    documents, questions = [], []
    for i, entity in enumerate(entities):
        doc_id = f"doc-{i:03d}"
        documents.append({"id": doc_id, "title": entity["title"],
                          "text": " ".join(sentence for sentence, _, _ in entity["facts"])})
        questions.append([{"question": q, "answer": a, "doc_id": doc_id} for _, q, a in entity["facts"]])
    # by document: 125 documents (500 questions) for test, 25 (100) for val, the rest for train
    splits = {"test": questions[:125], "val": questions[125:150], "train": questions[150:]}
    return documents, {name: [q for doc in docs for q in doc] for name, docs in splits.items()}


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = parser.parse_args()
    documents, splits = build(args.seed)
    files = {"documents.jsonl": render(documents), **{f"{k}.jsonl": render(v) for k, v in splits.items()}}
    if args.check:
        stale = [name for name, text in files.items()
                 if not (args.out / name).is_file() or (args.out / name).read_text() != text]
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text)
    print(f"wrote {len(documents)} documents and {', '.join(f'{len(v)} {k}' for k, v in splits.items())} "
          f"questions to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
