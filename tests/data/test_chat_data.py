"""Chat datasets: records of chat messages (TRL's conversational prompts), a system prompt for every source,
field names mapped to nested fields (verl's layout), CSV files and saved datasets, and sources mixed with
weights; every bad record names its file, row and field."""

import json
import re
from collections import Counter

import datasets
import pytest

from lit_grpo.data import FileSource, MixedSource, PromptDataModule, SyntheticArithmetic
from lit_grpo.data.sources import PromptSource
from lit_grpo.models.tiny import char_tokenizer

CHAT = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture
def tok(tmp_path):
    tokenizer = char_tokenizer()
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(tmp_path / "tok")
    return str(tmp_path / "tok")


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def conversation(question, system=None):
    turns = [{"role": "system", "content": system}] if system else []
    return turns + [{"role": "user", "content": question}]


def test_chat_message_records_are_rendered_by_the_chat_template(tmp_path, tok):
    rows = [{"prompt": conversation("2+2?"), "answer": "4"},
            {"prompt": conversation("3+3?", system="Be terse."), "answer": 6}]
    source = FileSource(train=jsonl(tmp_path / "t.jsonl", rows), tokenizer=tok, instruction="A number.")
    records = source.load("train")
    # in the plain style too (chat messages need the template), the instruction on the last user turn
    assert [r["prompt"] for r in records] == [
        "<|user|>2+2?\nA number.\n<|assistant|>",
        "<|system|>Be terse.\n<|user|>3+3?\nA number.\n<|assistant|>",
    ]
    assert [r["reference"] for r in records] == ["4", "6"]


def test_the_system_prompt_reaches_every_style_and_a_records_own_system_message_wins(tmp_path, tok):
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": conversation("3+3?", system="Own."), "answer": "6"}]
    path = jsonl(tmp_path / "t.jsonl", rows)
    chat = FileSource(train=path, style="chat", tokenizer=tok)
    PromptDataModule(chat, system_prompt="You add numbers.")
    assert [r["prompt"] for r in chat.load("train")] == [
        "<|system|>You add numbers.\n<|user|>2+2?\n<|assistant|>",
        "<|system|>Own.\n<|user|>3+3?\n<|assistant|>",
    ]
    plain = SyntheticArithmetic(num_train=2, num_val=0, num_test=0)
    bare = [r["prompt"] for r in plain.load("train")]
    PromptDataModule(plain, system_prompt="You add numbers.")
    assert [r["prompt"] for r in plain.load("train")] == [f"You add numbers.\n\n{p}" for p in bare]
    think = SyntheticArithmetic(num_train=1, num_val=0, num_test=0, style="think")
    PromptDataModule(think, system_prompt="S.")
    assert think.load("train")[0]["prompt"].startswith("S.\n\nA conversation between a user")


def test_a_source_that_renders_no_prompts_refuses_a_system_prompt():
    class Raw(PromptSource):
        def load(self, split):
            return [{"prompt": "p", "reference": "r", "id": f"{split}-0", "columns": {}}]

    PromptDataModule(Raw())  # none asked: fine
    with pytest.raises(ValueError, match="Raw does not render its prompts.*system_prompt cannot reach them"):
        PromptDataModule(Raw(), system_prompt="S.")


@pytest.mark.parametrize(("prompt", "pattern"), [
    ([], "must be a prompt text or a non-empty list of chat messages"),
    ([{"role": "user"}], "message 1 must be an object with a role .* and a text content"),
    ([{"role": "robot", "content": "hi"}], "message 1 must be an object with a role"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
     "ends with a 'assistant' turn; a prompt ends with the user's turn"),
    ([{"role": "system", "content": "s"}, {"role": "user", "content": "  "}], "no user turn with text"),
    (7, "must be a string"),
])
def test_a_bad_conversation_names_the_file_line_field_and_turn(tmp_path, tok, prompt, pattern):
    path = jsonl(tmp_path / "t.jsonl", [{"prompt": conversation("ok"), "answer": "1"},
                                         {"prompt": prompt, "answer": "2"}])
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 2: field 'prompt'") + ".*" + pattern):
        FileSource(train=path, tokenizer=tok).load("train")
    # skipped and counted instead, with skip_bad_rows
    data = PromptDataModule(FileSource(train=path, tokenizer=tok), prompts_per_step=1, skip_bad_rows=True)
    data.setup("fit")
    assert data.skipped_rows == {"train": 1}


def test_chat_messages_in_the_think_style_or_without_a_template_are_refused(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", [{"prompt": conversation("ok"), "answer": "1"}])
    with pytest.raises(ValueError, match="style='think' wraps one question.*use style: chat"):
        FileSource(train=path, style="think", tokenizer="unused").load("train")
    char_tokenizer().save_pretrained(tmp_path / "plain-tok")
    with pytest.raises(ValueError, match="only a chat template renders.*has none"):
        FileSource(train=path, tokenizer=str(tmp_path / "plain-tok")).load("train")


def test_fields_are_mapped_to_nested_fields_as_verl_lays_them_out(tmp_path, tok):
    rows = [{"prompt": conversation("2+2?"), "reward_model": {"ground_truth": 4, "style": "rule"},
             "extra_info": {"index": 7}}]
    source = FileSource(train=jsonl(tmp_path / "t.jsonl", rows), tokenizer=tok,
                        answer_field="reward_model.ground_truth", extra_fields=["extra_info.index"])
    record = source.load("train")[0]
    assert record["reference"] == "4" and record["columns"] == {"extra_info.index": 7}
    broken = jsonl(tmp_path / "b.jsonl", [{"prompt": "q", "reward_model": {"style": "rule"}}])
    with pytest.raises(ValueError, match=re.escape(f"{broken}, line 1: field 'reward_model.ground_truth' "
                                                   "(answer_field) is missing or null")):
        FileSource(train=broken, answer_field="reward_model.ground_truth").load("train")


def test_csv_files_are_read_with_their_header_and_bad_lines_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('question,answer,level\n"What is 1,000 + 1?",1001,2\nshort line\n')
    source = FileSource(train=str(path), prompt_field="question", template="{question}", extra_fields=["level"])
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 3: ") + ".*1 value\\(s\\) where the header has 3 columns"):
        source.load("train")
    path.write_text('question,answer,level\n"What is 1,000 + 1?",1001,2\n')
    record = source.load("train")[0]
    assert (record["prompt"], record["reference"], record["columns"]) == ("What is 1,000 + 1?", "1001",
                                                                          {"level": "2"})


def test_a_saved_dataset_directory_is_a_split(tmp_path, tok):
    datasets.Dataset.from_list([{"prompt": conversation(f"q{i}"), "answer": str(i)} for i in range(3)]) \
        .save_to_disk(str(tmp_path / "saved"))
    records = FileSource(val=str(tmp_path / "saved"), tokenizer=tok).load("val")
    assert [r["reference"] for r in records] == ["0", "1", "2"] and records[2]["prompt"].startswith("<|user|>q2")
    datasets.DatasetDict({"train": datasets.Dataset.from_list([{"prompt": "p", "answer": "a"}])}) \
        .save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(IsADirectoryError, match="a DatasetDict: read it with HubSource"):
        FileSource(train=str(tmp_path / "dict")).load("train")


def _numbers(tmp_path, name, n):
    return FileSource(train=jsonl(tmp_path / f"{name}.jsonl", [{"prompt": f"{name}{i}", "answer": str(i)}
                                                               for i in range(n)]),
                      val=jsonl(tmp_path / f"{name}-val.jsonl", [{"prompt": f"{name}-v", "answer": "0"}]))


def test_sources_mix_with_their_weights_and_a_fixed_seed(tmp_path):
    a, b = _numbers(tmp_path, "a", 4000), _numbers(tmp_path, "b", 4000)
    mix = MixedSource([a, b], weights=[3, 1], seed=5)
    train = mix.load("train")
    assert train == MixedSource([a, b], weights=[3, 1], seed=5).load("train")
    assert train != MixedSource([a, b], weights=[3, 1], seed=6).load("train")
    # first_exhausted: source a runs out first; up to then b's share is binomial(n, 1/4): 5 sd is exact enough
    counts = Counter(r["prompt"][0] for r in train)
    n = len(train)
    assert counts["a"] == 4000 and abs(counts["b"] - n / 4) < 5 * (n * 0.25 * 0.75) ** 0.5
    # each source's records in its own order, ids tagged with the source
    assert [r["prompt"] for r in train if r["id"].endswith("@0")] == [f"a{i}" for i in range(4000)]
    assert len({r["id"] for r in train}) == n
    # held-out splits: every source's in full, in order
    assert [(r["prompt"], r["id"]) for r in mix.load("val")] == [("a-v", "val-0@0"), ("b-v", "val-0@1")]


def test_all_exhausted_repeats_the_small_source_until_every_source_is_read(tmp_path):
    big, small = _numbers(tmp_path, "a", 300), _numbers(tmp_path, "b", 10)
    train = MixedSource([big, small], stop="all_exhausted").load("train")
    counts = Counter(r["prompt"][0] for r in train)
    assert counts["a"] == 300 and counts["b"] > 10  # the small one came round again
    first = Counter(r["prompt"][0] for r in MixedSource([big, small]).load("train"))
    assert first["b"] == 10 and first["a"] < 300  # first_exhausted: stops when the small one runs out


def test_a_mix_feeds_the_datamodule_with_a_system_prompt_for_all(tmp_path):
    data = PromptDataModule(MixedSource([_numbers(tmp_path, "a", 8), _numbers(tmp_path, "b", 8)]),
                            prompts_per_step=4, system_prompt="S.")
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    assert all(p.startswith("S.\n\n") for p in batch.prompts) and len(set(batch.ids)) == 4


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"sources": []}, "non-empty list of prompt sources"),
    ({"weights": [1.0]}, "1 weights for 2 sources"),
    ({"weights": [1.0, 0.0]}, "must all be finite and > 0"),
    ({"weights": [1.0, float("nan")]}, "must all be finite and > 0"),
    ({"stop": "never"}, "stop='never'; use first_exhausted or all_exhausted"),
])
def test_a_mix_that_cannot_work_is_named(tmp_path, kwargs, pattern):
    sources = [_numbers(tmp_path, "a", 2), _numbers(tmp_path, "b", 2)]
    with pytest.raises(ValueError, match=pattern):
        MixedSource(**{"sources": sources, **kwargs})


def test_a_mix_needs_every_source_to_have_training_records(tmp_path):
    held_out = FileSource(val=jsonl(tmp_path / "v.jsonl", [{"prompt": "v", "answer": "0"}]))
    mix = MixedSource([_numbers(tmp_path, "a", 2), held_out])
    assert not mix.has_split("train") and mix.has_split("val") and not mix.has_split("test")
    with pytest.raises(ValueError, match=r"sources \[1\] have no train split"):
        mix.load("train")
