"""Tasks on fixture copies of their datasets: references, prompt styles, bad rows, default rewards."""

import json
import logging
import os
import re
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
from task_fixtures import (  # noqa: E402
    GSM8K_ROWS,
    offline_datasets,
    write_aqua,
    write_gsm8k,
    write_math500,
    write_poetry,
)

from lit_grpo.data import (  # noqa: E402
    GSM8K,
    MATH500,
    THINK_TEMPLATE,
    FileSource,
    MultipleChoice,
    PromptDataModule,
    ReferenceText,
    SyntheticArithmetic,
    SyntheticChoice,
    SyntheticResidue,
)
from lit_grpo.data.tasks import gsm8k_answer, last_boxed  # noqa: E402
from lit_grpo.models.tiny import char_tokenizer  # noqa: E402
from lit_grpo.rewards import ChoiceLetter, ExactMatch, MathVerify, TextSimilarity, WeightedSum  # noqa: E402


@pytest.fixture
def offline(tmp_path, monkeypatch):
    offline_datasets(tmp_path, monkeypatch)


# ---------------------------------------------------------------- reference extractors


@pytest.mark.parametrize(
    ("text", "answer"),
    [("3 + 4 = 7\n#### 7", "7"), ("#### 1,500", "1500"), ("x\n#### -3.5\nmore", "-3.5"), ("#### ", None),
     ("no marker 7", None), ("#### 12 apples", "12 apples")],
)  # fmt: skip
def test_gsm8k_answer(text, answer):
    assert gsm8k_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [("so $\\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}"), ("\\boxed{1} then \\boxed{2}", "2"),
     ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"), ("\\fbox{5}", "5"), ("\\boxed{3", None), ("none", None),
     ("\\boxed{}", None)],
)  # fmt: skip
def test_last_boxed(text, answer):
    assert last_boxed(text) == answer


# ---------------------------------------------------------------- GSM8K


def test_gsm8k_reads_the_hub_layout(tmp_path, offline):
    task = GSM8K(path=write_gsm8k(tmp_path / "gsm8k"))
    train, val, test = task.load("train"), task.load("val"), task.load("test")
    assert [r["reference"] for r in train] == ["7", "36", "50", "1500", "7", "12"]
    assert train[0]["prompt"] == GSM8K_ROWS[0][0] + "\n" + task.instruction
    assert "'####'" in task.instruction
    assert len(val) == len(test) == 2 and val[0]["id"] == "val-0" and train[3]["id"] == "train-3"


def test_gsm8k_missing_final_answer_names_the_row_and_field(tmp_path, offline):
    rows = [*GSM8K_ROWS[:2], ("Q without an answer?", "the answer is 3")]
    task = GSM8K(path=write_gsm8k(tmp_path / "gsm8k", rows))
    with pytest.raises(
        ValueError, match=r"\[train\], row 3: field 'answer' \(answer_field\) has no final answer"
    ):
        task.load("train")
    dm = PromptDataModule(task, prompts_per_step=2, skip_bad_rows=True)
    dm.setup("fit")
    assert len(dm.splits["train"]) == 2 and dm.skipped_rows == {"train": 1}


def test_think_style_wraps_the_question(tmp_path, offline):
    task = GSM8K(path=write_gsm8k(tmp_path / "gsm8k"), style="think")
    prompt = task.load("train")[0]["prompt"]
    assert prompt == THINK_TEMPLATE.format(question=GSM8K_ROWS[0][0])
    assert "<think>" in prompt and "<answer>" in prompt and "####" not in prompt


# ---------------------------------------------------------------- MATH-500


def test_math500_reads_the_hub_layout_and_holds_out_val(tmp_path, offline):
    task = MATH500(path=write_math500(tmp_path / "math"), val_size=2, extra_fields=["level"])
    train, val = task.load("train"), task.load("val")
    assert len(train) == 4 and len(val) == 2
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}
    assert all(r["prompt"].endswith("Put the final answer within \\boxed{}.") for r in train)
    assert {r["reference"] for r in train + val} == {"\\frac{3}{4}", "1024", "3\\sqrt{2}", "2", "56", "7"}
    assert all(set(r["columns"]) == {"level"} for r in train)


def test_math500_extracts_the_boxed_answer_from_solutions(tmp_path, offline):
    rows = [
        ("P1?", "so $\\boxed{\\frac{3}{4}}$", ""),
        ("P2?", "hence \\boxed{12}", ""),
        ("P3?", "\\boxed{1", ""),
    ]
    task = MATH500(path=write_math500(tmp_path / "math", rows), answer_field="solution", val_size=None)
    with pytest.raises(ValueError, match=r"row 3: field 'solution' \(answer_field\) has no answer"):
        task.load("train")
    dm = PromptDataModule(task, prompts_per_step=1, skip_bad_rows=True)
    dm.setup("fit")
    assert [r["reference"] for r in dm.splits["train"]] == ["\\frac{3}{4}", "12"]


# ---------------------------------------------------------------- multiple choice


def test_aqua_options_letters_and_guess_rate_column(tmp_path, offline):
    task = MultipleChoice(path=write_aqua(tmp_path / "aqua"))
    train = task.load("train")
    assert train[0]["prompt"] == (
        "What is 5 + 6?\nA) 10\nB) 11\nC) 12\nD) 13\nE) 14\nAnswer with the letter of the correct option."
    )
    assert [r["reference"] for r in train] == ["B", "C", "A", "D", "E", "A"]
    assert all(r["columns"] == {"num_choices": 5} for r in train)
    assert len(task.load("val")) == 2 and len(task.load("test")) == 2


def test_choice_answers_as_indices_and_bad_letters(tmp_path):
    path = tmp_path / "mc.jsonl"
    rows = [
        {"question": "Pick two", "choices": ["one", "two", "three"], "answer": 1},
        {"question": "Pick one", "choices": ["one", "two", "three"], "answer": "D"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = MultipleChoice(path="json", name=None, data_files={"train": str(path)}, val_split=None, test_split=None,
                          options_field="choices", answer_field="answer")  # fmt: skip
    with pytest.raises(
        ValueError, match=r"row 2: field 'answer' \(answer_field\) is 'D', not one of the 3 options ABC"
    ):
        task.load("train")
    first = next(task.stream("train"))
    assert first["reference"] == "B" and first["prompt"].startswith("Pick two\nA) one\nB) two\nC) three")


# ---------------------------------------------------------------- reference text


def test_poetry_reference_text(tmp_path, offline):
    task = ReferenceText(path=write_poetry(tmp_path / "poetry"), prompt_field="poem name", answer_field="content",
                         template='Write a short poem titled "{poem name}".', val_size=2)  # fmt: skip
    train = task.load("train")
    assert len(train) == 4 and len(task.load("val")) == 2
    assert all(re.fullmatch(r'Write a short poem titled "\w+"\.', r["prompt"]) for r in train)
    assert isinstance(task.default_reward(), TextSimilarity)


# ---------------------------------------------------------------- synthetic choice


def test_synthetic_choice_options_contain_the_result_at_the_reference():
    task = SyntheticChoice(num_train=300, num_val=20, num_test=20, num_choices=5, spread=3, max_operand=20)
    for record in task.load("train"):
        a, b = map(int, re.match(r"(\d+)\+(\d+)=\?", record["prompt"]).groups())
        options = dict(re.findall(r"^([A-E])\) (-?\d+)$", record["prompt"], re.MULTILINE))
        assert len(options) == 5 and len(set(options.values())) == 5
        assert int(options[record["reference"]]) == a + b
        assert all(abs(int(v) - (a + b)) <= 3 for v in options.values())
        assert record["columns"] == {"num_choices": 5}
    assert task.guess_rate == pytest.approx(0.2)


def test_synthetic_choice_letters_are_uniform_so_guessing_succeeds_one_in_k():
    task = SyntheticChoice(num_train=4000, num_val=0, num_test=0, num_choices=4)
    counts = Counter(r["reference"] for r in task.load("train"))
    assert set(counts) == set("ABCD")
    assert all(abs(c / 4000 - 0.25) < 0.03 for c in counts.values())  # 4 sd of a binomial share


def test_synthetic_choice_is_deterministic_and_validated():
    assert SyntheticChoice(num_train=50).load("train") == SyntheticChoice(num_train=50).load("train")
    assert SyntheticChoice(num_train=50).load("train") != SyntheticChoice(num_train=50, seed=1).load("train")
    with pytest.raises(ValueError, match="spread=1 leaves fewer than num_choices - 1 = 4"):
        SyntheticChoice(num_choices=5, spread=1)
    with pytest.raises(ValueError, match="num_choices=1 must be in 2..26"):
        SyntheticChoice(num_choices=1)


# ---------------------------------------------------------------- synthetic residue


def test_synthetic_residue_asks_the_result_modulo_a_per_problem_k():
    task = SyntheticResidue(num_train=600, num_val=20, num_test=20, max_operand=30, operators="+-")
    train = task.load("train")
    for record in train:
        a, op, b, k = re.fullmatch(r"\((\d+)([+-])(\d+)\)%(\d+)=", record["prompt"]).groups()
        result = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert record["reference"] == str(result % int(k)) and 0 <= int(record["reference"]) < int(k)
        assert record["columns"] == {"num_choices": int(k)}
    assert set(Counter(r["columns"]["num_choices"] for r in train)) == set(range(2, 11))
    assert task.guess_rate == pytest.approx(sum(1 / k for k in range(2, 11)) / 9)
    # the same problems, in the same splits, as the open-answer task
    plain = SyntheticArithmetic(num_train=600, num_val=20, num_test=20, max_operand=30, operators="+-")
    assert [r["id"] for r in plain.load("test")] == [r["id"] for r in task.load("test")]


def test_synthetic_residue_answers_are_near_uniform_so_a_constant_answer_scores_about_chance():
    records = SyntheticResidue(num_train=8000, num_val=0, num_test=0, min_modulus=4, max_modulus=4).load("train")
    counts = Counter(r["reference"] for r in records)
    assert set(counts) == {"0", "1", "2", "3"}
    assert all(abs(c / 8000 - 0.25) < 0.02 for c in counts.values())  # 4 sd of a binomial share


def test_synthetic_residue_is_deterministic_and_validated():
    assert SyntheticResidue(num_train=50).load("train") == SyntheticResidue(num_train=50).load("train")
    assert SyntheticResidue(num_train=50).load("train") != SyntheticResidue(num_train=50, seed=1).load("train")
    assert SyntheticResidue(question="{a} {op} {b} mod {k} =").load("val")[0]["prompt"].count(" mod ") == 1
    with pytest.raises(ValueError, match="min_modulus=1, max_modulus=10 must satisfy 2 <= min_modulus <= max_modulus"):
        SyntheticResidue(min_modulus=1)
    with pytest.raises(ValueError, match="min_modulus=5, max_modulus=3"):
        SyntheticResidue(min_modulus=5, max_modulus=3)
    with pytest.raises(ValueError, match=r"question='\{a\}\+\{b\}=' is not a format string over"):
        SyntheticResidue(question="{a}+{b}=")  # no {k}: every problem would read the same for every k
    with pytest.raises(ValueError, match="exceeds the 100 distinct problems"):
        SyntheticResidue(max_operand=9)


# ---------------------------------------------------------------- styles


def save_tokenizer(path, chat_template=None):
    tok = char_tokenizer()
    if chat_template:
        tok.chat_template = chat_template
    tok.save_pretrained(path)
    return str(path)


CHAT = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"


def test_chat_style_renders_the_tokenizers_template(tmp_path):
    tok = save_tokenizer(tmp_path / "tok", CHAT)
    task = SyntheticArithmetic(num_train=3, num_val=0, num_test=0, style="chat", tokenizer=tok,
                               instruction="Answer with the number.")  # fmt: skip
    record = task.load("train")[0]
    question = record["prompt"].split("<|user|>")[1].split("\n")[0]
    assert re.fullmatch(r"\d+\+\d+=", question)
    assert record["prompt"] == f"<|user|>{question}\nAnswer with the number.\n<|assistant|>"


def test_chat_style_without_a_template_falls_back_to_plain_with_a_warning(tmp_path, caplog):
    tok = save_tokenizer(tmp_path / "tok")
    source = FileSource(train=str(tmp_path / "t.jsonl"), style="chat", tokenizer=tok, instruction="Be brief.")
    (tmp_path / "t.jsonl").write_text('{"prompt": "Hi?", "answer": "hello"}\n')
    with caplog.at_level(logging.WARNING):
        assert source.load("train")[0]["prompt"] == "Hi?\nBe brief."
    assert "has no chat template" in caplog.text and "falls back to plain" in caplog.text


def test_chat_style_needs_a_tokenizer(tmp_path):
    task = SyntheticArithmetic(num_train=3, num_val=0, num_test=0, style="chat")
    with pytest.raises(ValueError, match="style='chat' needs a tokenizer.*option `tokenizer`"):
        task.load("train")
    with pytest.raises(ValueError, match="style='fancy' is not a prompt style"):
        SyntheticArithmetic(style="fancy")


def test_plain_arithmetic_prompts_are_unchanged():
    records = SyntheticArithmetic(num_train=5, num_val=0, num_test=0).load("train")
    assert all(re.fullmatch(r"\d+\+\d+=", r["prompt"]) for r in records)


# ---------------------------------------------------------------- default rewards


def test_default_rewards():
    assert isinstance(SyntheticArithmetic().default_reward(), ExactMatch)
    assert isinstance(SyntheticChoice().default_reward(), ChoiceLetter)
    assert isinstance(SyntheticResidue().default_reward(), ExactMatch)
    assert isinstance(GSM8K().default_reward(), MathVerify)
    assert isinstance(MATH500().default_reward(), MathVerify)
    assert isinstance(MultipleChoice().default_reward(), ChoiceLetter)
    think = GSM8K(style="think").default_reward()
    assert isinstance(think, WeightedSum) and think.weights == [1.0, 0.1]
    assert think(["<think>7 more</think> <answer>7</answer>"], ["7"]).scores.tolist() == [pytest.approx(1.1)]
    arith = SyntheticArithmetic(style="think").default_reward()
    assert arith(["<think>x</think><answer>12</answer>", "12"], ["12", "12"]).scores.tolist() == [
        pytest.approx(1.1), 0.0,
    ]  # fmt: skip


def test_synthetic_choice_mixed_option_counts_and_balanced_holdout():
    task = SyntheticChoice(num_train=400, num_val=180, num_test=180, num_choices=10, min_choices=2, spread=10,
                           balanced_holdout=True)  # fmt: skip
    train = task.load("train")
    ks = Counter(r["columns"]["num_choices"] for r in train)
    assert set(ks) == set(range(2, 11))  # every k in 2..10 occurs
    for record in train:
        letters = re.findall(r"^([A-Z])\) ", record["prompt"], re.MULTILINE)
        assert len(letters) == record["columns"]["num_choices"] and record["reference"] in letters
    assert task.guess_rate == pytest.approx(sum(1 / k for k in range(2, 11)) / 9)
    for split in ("val", "test"):
        records = task.load(split)
        by_k: dict[int, Counter] = {}
        for r in records:
            by_k.setdefault(r["columns"]["num_choices"], Counter())[r["reference"]] += 1
        for k, counts in by_k.items():
            n = sum(counts.values())
            assert all(n // k <= counts[chr(65 + i)] <= -(-n // k) for i in range(k))  # equal up to one
    # the same problems and options as without balancing, only the correct position moves
    plain = SyntheticChoice(num_train=400, num_val=180, num_test=180, num_choices=10, min_choices=2, spread=10)
    assert plain.load("train") == train
    assert [r["id"] for r in plain.load("val")] == [r["id"] for r in task.load("val")]
    with pytest.raises(ValueError, match="min_choices=1 must be in 2..num_choices=4"):
        SyntheticChoice(num_choices=4, min_choices=1)
