import json
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402
import pytest  # noqa: E402

from lit_grpo.data import FileSource, HubSource, PromptDataModule, SyntheticArithmetic  # noqa: E402

# ---------------------------------------------------------------- SyntheticArithmetic


def prompts(records):
    return [r["prompt"] for r in records]


def test_synthetic_is_deterministic_and_seed_dependent():
    a = SyntheticArithmetic(num_train=50, num_val=10, num_test=10, seed=3)
    b = SyntheticArithmetic(num_train=50, num_val=10, num_test=10, seed=3)
    c = SyntheticArithmetic(num_train=50, num_val=10, num_test=10, seed=4)
    for split in ("train", "val", "test"):
        assert a.load(split) == b.load(split)
    assert prompts(a.load("train")) != prompts(c.load("train"))


def test_synthetic_splits_are_disjoint_sized_and_stable():
    source = SyntheticArithmetic(num_train=300, num_val=40, num_test=30, max_operand=19, operators="+-")
    train, val, test = (prompts(source.load(s)) for s in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (300, 40, 30)
    everything = train + val + test
    assert len(set(everything)) == len(everything)
    assert source.load("train")[5]["id"] == "train-5" and source.load("val")[0]["id"] == "val-0"
    # the hold-out sets do not move when the training set grows
    bigger = SyntheticArithmetic(num_train=350, num_val=40, num_test=30, max_operand=19, operators="+-")
    assert prompts(bigger.load("val")) == val and prompts(bigger.load("test")) == test


def operands(records):
    return [int(x) for r in records for x in re.match(r"(\d+)[-+*](\d+)=$", r["prompt"]).groups()]


def test_max_operand_sets_the_operand_range():
    easy = operands(SyntheticArithmetic(num_train=80, max_operand=9, num_val=0, num_test=0).load("train"))
    hard = operands(SyntheticArithmetic(num_train=80, max_operand=999, num_val=0, num_test=0).load("train"))
    assert max(easy) <= 9 and min(easy) >= 0
    assert max(hard) > 99


def test_references_for_every_operator_golden():
    # max_operand=1 with three operators: exactly 12 problems, all drawn
    source = SyntheticArithmetic(num_train=8, num_val=2, num_test=2, max_operand=1, operators="+-*")
    got = {r["prompt"]: r["reference"] for s in ("train", "val", "test") for r in source.load(s)}
    assert got == {
        "0+0=": "0", "0+1=": "1", "1+0=": "1", "1+1=": "2",
        "0-0=": "0", "0-1=": "-1", "1-0=": "1", "1-1=": "0",
        "0*0=": "0", "0*1=": "0", "1*0=": "0", "1*1=": "1",
    }  # fmt: skip


def test_references_match_the_arithmetic():
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    for r in SyntheticArithmetic(num_train=200, operators="*-+").load("train"):
        a, op, b = re.match(r"(\d+)([-+*])(\d+)=$", r["prompt"]).groups()
        assert r["reference"] == str(ops[op](int(a), int(b)))


def test_too_small_space_is_refused_with_the_numbers_and_the_fix():
    with pytest.raises(
        ValueError, match=r"= 120 exceeds the 100 distinct problems.*max_operand=9.*raise max_operand"
    ):
        SyntheticArithmetic(num_train=100, num_val=10, num_test=10, max_operand=9)


@pytest.mark.parametrize("ops", ["", "/", "++"])
def test_bad_operators_are_refused(ops):
    with pytest.raises(ValueError, match="operators="):
        SyntheticArithmetic(operators=ops)


# ---------------------------------------------------------------- FileSource

ROWS = [
    {"question": "What is 2+2?", "answer": 4, "level": 1, "topic": "add"},
    {"question": "What is 3*3?", "answer": 9, "level": 2, "topic": "mul"},
]
TEMPLATE = "Question: {question} ({topic})\nAnswer:"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def check_round_trip(records):
    assert [r["prompt"] for r in records] == [
        "Question: What is 2+2? (add)\nAnswer:",
        "Question: What is 3*3? (mul)\nAnswer:",
    ]
    assert [r["reference"] for r in records] == ["4", "9"]
    assert [r["id"] for r in records] == ["train-0", "train-1"]
    assert [r["columns"] for r in records] == [{"level": 1, "answer": 4}, {"level": 2, "answer": 9}]


def file_source(**kwargs):
    return FileSource(prompt_field="question", template=TEMPLATE, extra_fields=["level", "answer"], **kwargs)


def test_jsonl_round_trip_with_template_and_extra_fields(tmp_path):
    check_round_trip(file_source(train=write_jsonl(tmp_path / "train.jsonl", ROWS)).load("train"))


def test_parquet_round_trip_with_template_and_extra_fields(tmp_path):
    path = tmp_path / "train.parquet"
    datasets.Dataset.from_list(ROWS).to_parquet(str(path))
    check_round_trip(file_source(train=str(path)).load("train"))


def test_extra_fields_reach_the_prompt_batch(tmp_path):
    source = file_source(train=write_jsonl(tmp_path / "train.jsonl", ROWS))
    dm = PromptDataModule(source, prompts_per_step=2)
    dm.setup("fit")
    batch = dm.refill(2)
    assert sorted(batch.columns) == ["answer", "level"]
    assert batch.select(sorted(range(2), key=batch.ids.__getitem__)).columns == {
        "answer": [4, 9],
        "level": [1, 2],
    }


@pytest.mark.parametrize(
    "bad_line, error, pattern",
    [
        ('{"question": "x", "answer": ', ValueError, "malformed JSON"),
        (
            '{"answer": "1", "level": 1, "topic": "t"}',
            ValueError,
            "field 'question' \\(prompt_field\\) is missing",
        ),
        (
            '{"question": "x", "level": 1, "topic": "t"}',
            ValueError,
            "field 'answer' \\(answer_field\\) is missing",
        ),
        (
            '{"question": "x", "answer": "1", "level": null, "topic": "t"}',
            ValueError,
            "field 'level' \\(extra_fields\\) is missing or null",
        ),
        (
            '{"question": "  ", "answer": "1", "level": 1, "topic": "t"}',
            ValueError,
            "'question'.*empty prompt",
        ),
        (
            '{"question": 7, "answer": "1", "level": 1, "topic": "t"}',
            TypeError,
            "'question'.*must be a string",
        ),
        ('{"question": "x", "answer": "1", "level": 1}', ValueError, "template .* references field 'topic'"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, bad_line, error, pattern):
    path = tmp_path / "train.jsonl"
    # line 2 is blank: line numbers count every line of the file
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + bad_line + "\n")
    with pytest.raises(error, match=pattern) as info:
        file_source(train=str(path)).load("train")
    assert f"{path}, line 3" in str(info.value)


def test_bad_parquet_row_names_the_row(tmp_path):
    path = tmp_path / "val.parquet"
    datasets.Dataset.from_list([{"prompt": "ok", "answer": "1"}, {"prompt": "", "answer": "2"}]).to_parquet(
        str(path)
    )
    with pytest.raises(ValueError, match=re.escape(f"{path}, row 2: field 'prompt'")):
        FileSource(val=str(path)).load("val")


def test_missing_file_names_the_path_and_the_option(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match=re.escape(f"val={missing!r}")):
        FileSource(val=missing).load("val")


def test_a_directory_for_a_data_file_is_named_as_one(tmp_path):
    with pytest.raises(IsADirectoryError, match=re.escape(f"val={str(tmp_path)!r} is a directory that Dataset.save_to_disk did not write; give the data file")):
        FileSource(val=str(tmp_path)).load("val")


def test_every_row_skipped_says_so(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "", "answer": "1"}\nnot json\n')
    data = PromptDataModule(FileSource(train=str(path)), prompts_per_step=1, skip_bad_rows=True)
    with pytest.raises(ValueError, match=re.escape("has 0 prompts (2 bad rows were skipped: skip_bad_rows is set")):
        data.setup("fit")


def test_unconfigured_split_names_the_option(tmp_path):
    source = FileSource(train=write_jsonl(tmp_path / "t.jsonl", [{"prompt": "p", "answer": "a"}]))
    assert source.has_split("train") and not source.has_split("test")
    with pytest.raises(ValueError, match="set the option `test`"):
        source.load("test")


def test_unknown_suffix_is_refused(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("prompt\tanswer\n")
    with pytest.raises(ValueError, match="'.tsv'; use .jsonl, .json \\(JSON lines\\), .parquet or .csv"):
        FileSource(train=str(path)).load("train")


# ---------------------------------------------------------------- HubSource


@pytest.fixture
def offline_hf(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def gsm_like(n, start=0):
    return [{"question": f"q{i}?", "answer": f"#### {i}", "kind": i % 2} for i in range(start, start + n)]


def test_hub_source_from_local_json_files(tmp_path, offline_hf):
    files = {
        "train": write_jsonl(tmp_path / "tr.jsonl", gsm_like(5)),
        "test": write_jsonl(tmp_path / "te.jsonl", gsm_like(3, 100)),
    }
    source = HubSource("json", data_files=files, template="Q: {question}", extra_fields=["kind"])
    train, val = source.load("train"), source.load("val")
    assert [r["prompt"] for r in train] == [f"Q: q{i}?" for i in range(5)]
    assert [r["reference"] for r in val] == ["#### 100", "#### 101", "#### 102"]
    assert [r["id"] for r in val] == ["val-0", "val-1", "val-2"]
    assert train[3]["columns"] == {"kind": 1}
    with pytest.raises(ValueError, match="set the option `test_split`"):
        source.load("test")


def test_hub_source_from_a_saved_dataset_dict(tmp_path, offline_hf):
    ds = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(gsm_like(4)), "dev": datasets.Dataset.from_list(gsm_like(2, 50))}
    )
    ds.save_to_disk(str(tmp_path / "saved"))
    source = HubSource(str(tmp_path / "saved"), val_split="dev")
    assert [r["prompt"] for r in source.load("val")] == ["q50?", "q51?"]
    assert len(source.load("train")) == 4


def test_hub_source_val_size_holds_out_training_rows(tmp_path, offline_hf):
    files = {"train": write_jsonl(tmp_path / "tr.jsonl", gsm_like(20))}
    source = HubSource("json", data_files=files, val_split=None, val_size=5, seed=1)
    train, val = source.load("train"), source.load("val")
    assert len(train) == 15 and len(val) == 5
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}
    assert all(r["id"] == f"train-{r['prompt'][1:-1]}" for r in train)  # ids keep the dataset row
    assert val == HubSource("json", data_files=files, val_split=None, val_size=5, seed=1).load("val")
    with pytest.raises(ValueError, match="val_split=None"):
        HubSource("json", val_size=5)


def test_hub_source_unavailable_dataset_names_the_id(offline_hf):
    with pytest.raises(
        RuntimeError, match="'lit-grpo-tests/no-such-dataset'.*available locally .* or downloadable"
    ):
        HubSource("lit-grpo-tests/no-such-dataset").load("train")


@pytest.mark.parametrize(
    "answer, text",
    [(146.0, "146"), (146, "146"), (-3.0, "-3"), (0.1, "0.1"), (2.5, "2.5"), (1 / 3, "0.3333333333333333"),
     (2.5e-07, "2.5e-07"), (1e20, "100000000000000000000"), ("146.0", "146.0")],
)
def test_json_number_answers_become_the_canonical_text_of_the_number(tmp_path, answer, text):
    path = write_jsonl(tmp_path / "train.jsonl", [{"prompt": "p", "answer": answer}])
    (record,) = FileSource(train=path).load("train")
    assert record["reference"] == text
    if not isinstance(answer, str):
        assert float(record["reference"]) == answer  # exact: the text reads back as the same number


@pytest.mark.parametrize("line, pattern", [('{"prompt": "p", "answer": NaN}', "is the number nan"),
                                           ('{"prompt": "p", "answer": true}', "is the boolean true")])
def test_answers_no_completion_can_match_are_bad_rows_naming_the_fix(tmp_path, line, pattern):
    path = tmp_path / "train.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}, line 1: field 'answer' .*{pattern}"):
        FileSource(train=str(path)).load("train")


def test_a_line_that_is_not_utf8_is_a_bad_row_naming_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    good = json.dumps({"prompt": "p", "answer": "1"}).encode()
    path.write_bytes(b"\xef\xbb\xbf" + good + b"\n" + '{"prompt": "caf\u00e9", "answer": "2"}'.encode("latin-1")
                     + b"\n" + good + b"\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 2: not UTF-8 text")):
        FileSource(train=str(path)).load("train")
    skipped = []
    records = list(FileSource(train=str(path)).stream("train", skipped.append))
    assert [r["id"] for r in records] == ["train-0", "train-2"]  # the byte-order mark of line 1 is ignored
    assert len(skipped) == 1 and "line 2" in str(skipped[0])
