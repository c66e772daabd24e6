"""Streaming, sharding across ranks, resuming and bad rows of the training data path."""

import json
import logging
import re
from itertools import islice

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_grpo.data import FileSource, PromptDataModule, PromptSource, PromptStream, SyntheticArithmetic
from lit_grpo.data.stream import batched, shard, shuffle_buffer


def write_prompts(path, n, bad_lines=None):
    """A JSONL file of ``n`` prompts ``"p<k>"`` with answers ``"<k>"``; ``bad_lines`` {line: text}."""
    lines = [json.dumps({"prompt": f"p{k}", "answer": str(k)}) for k in range(n)]
    for line_no, text in sorted((bad_lines or {}).items()):
        lines.insert(line_no - 1, text)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def stream_dm(tmp_path, n=40, **kwargs):
    kwargs = {"prompts_per_step": 4, "streaming": True, "shuffle_buffer": 8, **kwargs}
    dm = PromptDataModule(FileSource(train=write_prompts(tmp_path / "train.jsonl", n)), **kwargs)
    dm.setup("fit")
    return dm


def ids_of(batches):
    return [i for b in batches for i in b.ids]


# ---------------------------------------------------------------- building blocks


def test_shard_deals_by_position_and_drops_the_incomplete_tail():
    shards = [list(shard(range(11), i, 3)) for i in range(3)]
    assert shards == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]  # 9, 10: an incomplete block


def test_shuffle_buffer_is_a_seeded_permutation():
    out = list(shuffle_buffer(range(100), 10, np.random.default_rng(0)))
    assert sorted(out) == list(range(100)) and out != list(range(100))
    assert out == list(shuffle_buffer(range(100), 10, np.random.default_rng(0)))
    assert list(shuffle_buffer(range(5), 1, np.random.default_rng(0))) == list(range(5))


def test_shuffle_buffer_holds_at_most_its_size():
    read = []

    def source():
        for k in range(1000):
            read.append(k)
            yield k

    first = next(shuffle_buffer(source(), 16, np.random.default_rng(0)))
    assert len(read) == 17 and first in range(17)


def test_batched_drops_the_short_tail():
    assert list(batched(range(7), 3)) == [[0, 1, 2], [3, 4, 5]]


# ---------------------------------------------------------------- two ranks


@pytest.mark.parametrize("streaming", [False, True])
def test_two_ranks_see_disjoint_prompts_in_equal_numbers(tmp_path, streaming):
    dm = stream_dm(tmp_path, n=43, streaming=streaming)
    for epoch in (0, 1):
        ranks = []
        for rank in (0, 1):
            stream = dm.train_dataset(rank=rank, world_size=2)
            stream.epoch = epoch
            ranks.append(ids_of(stream))
        assert len(ranks[0]) == len(ranks[1]) == 20  # 21 prompts each, 5 batches of 4
        assert not set(ranks[0]) & set(ranks[1])
        assert len(set(ranks[0])) == 20 and len(set(ranks[1])) == 20


def test_two_ranks_cover_the_prompts_in_memory():
    dm = PromptDataModule(SyntheticArithmetic(num_train=40, num_val=0, num_test=0), prompts_per_step=5)
    dm.setup("fit")
    ranks = [ids_of(dm.train_dataset(rank=r, world_size=2)) for r in (0, 1)]
    assert sorted(ranks[0] + ranks[1]) == sorted(f"train-{k}" for k in range(40))


def test_refill_draws_from_the_ranks_share_only(tmp_path):
    dm = stream_dm(tmp_path, n=40)
    drawn = []
    for rank in (0, 1):
        stream = dm.train_dataset(rank=rank, world_size=2, salt=1).cycle()
        drawn.append([next(stream)["id"] for _ in range(20)])
    assert not set(drawn[0]) & set(drawn[1]) and len(set(drawn[0])) == 20


def test_a_rank_without_a_full_batch_is_an_error(tmp_path):
    dm = stream_dm(tmp_path, n=6, prompts_per_step=4)
    with pytest.raises(ValueError, match=r"rank 1 of 2 no full batch of prompts_per_step=4"):
        ids_of(dm.train_dataset(rank=1, world_size=2))


# ---------------------------------------------------------------- order and resume


def test_streaming_order_depends_on_the_seed_and_epoch_only(tmp_path):
    first = ids_of(stream_dm(tmp_path, seed=5).train_dataloader())
    assert first == ids_of(stream_dm(tmp_path, seed=5).train_dataloader())
    assert first != ids_of(stream_dm(tmp_path, seed=6).train_dataloader())
    assert sorted(first) == sorted(f"train-{k}" for k in range(40))  # every prompt once per epoch
    again = stream_dm(tmp_path, seed=5).train_dataset()
    again.epoch = 1
    assert ids_of(again) != first and sorted(ids_of(again)) == sorted(first)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_stream_started_at_record_k_is_the_tail_of_the_full_epoch(tmp_path, streaming):
    dm = stream_dm(tmp_path, streaming=streaming)
    full = [b.ids for b in dm.train_dataset()]
    stream = dm.train_dataset()
    stream.start = 3 * dm.prompts_per_step
    assert [b.ids for b in stream] == full[3:]


def test_loader_resumes_from_the_saved_position_without_a_trainer(tmp_path):
    dm = stream_dm(tmp_path)
    full = [b.ids for b in dm.train_dataloader()]
    run = stream_dm(tmp_path)
    for batch in list(run.train_dataloader())[:4]:
        run.on_before_batch_transfer(batch, 0)  # what Lightning calls for each consumed batch
    resumed = stream_dm(tmp_path)
    resumed.load_state_dict(run.state_dict())
    assert [b.ids for b in resumed.train_dataloader()] == full[4:]


def test_workers_keep_the_order(tmp_path):
    dm = stream_dm(tmp_path)
    expected = [b.ids for b in dm.train_dataloader()]
    dm2 = stream_dm(tmp_path, num_workers=2)
    assert [b.ids for b in dm2.train_dataloader()] == expected


class RecordIds(L.LightningModule):
    """Records the ids of every training batch and of a refill of 2 per step."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[str]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch.ids + self.trainer.datamodule.refill(2).ids)
        return (self.w**2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(dm, root, max_steps, ckpt_path=None, save_every=None):
    model = RecordIds()
    callbacks = [ModelCheckpoint(root, every_n_train_steps=save_every, save_top_k=-1)] if save_every else []
    trainer = L.Trainer(
        max_steps=max_steps, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=bool(save_every), callbacks=callbacks,
        default_root_dir=root, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    fit.trainer = trainer
    return model.seen


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("stop", [3, 10])  # mid-epoch, and exactly at the end of epoch 0
def test_resume_gives_the_uninterrupted_prompt_sequence(tmp_path, streaming, stop):
    # the uninterrupted run writes a checkpoint after step `stop`, as a run that then crashed would
    kwargs = {"n": 40, "streaming": streaming}  # 10 batches of 4 per epoch
    expected = fit(stream_dm(tmp_path, **kwargs), tmp_path / "run", max_steps=14, save_every=stop)
    (ckpt,) = (tmp_path / "run").glob(f"*step={stop}.ckpt")
    rest = fit(stream_dm(tmp_path, **kwargs), tmp_path / "resumed", max_steps=14, ckpt_path=ckpt)
    assert len(expected) == 14
    assert rest == expected[stop:]


def test_resume_from_a_checkpoint_written_after_fit_stopped(tmp_path):
    # Lightning counts the epoch cut by max_steps as finished; the data position does not
    expected = fit(stream_dm(tmp_path), tmp_path / "full", max_steps=8)
    first = fit(stream_dm(tmp_path), tmp_path / "first", max_steps=3)
    fit.trainer.save_checkpoint(tmp_path / "stopped.ckpt")
    rest = fit(stream_dm(tmp_path), tmp_path / "rest", max_steps=8, ckpt_path=tmp_path / "stopped.ckpt")
    assert first + rest == expected


# ---------------------------------------------------------------- bad rows and memory


class CountingSource(PromptSource):
    """Streams ``n`` prompts and counts how many were read."""

    def __init__(self, n):
        self.n = n
        self.read = 0

    def load(self, split):
        return list(self.stream(split))

    def stream(self, split, on_bad_row=None):
        for k in range(self.n):
            self.read += 1
            yield {"prompt": f"p{k}", "reference": str(k), "id": f"{split}-{k}", "columns": {}}


def test_streaming_reads_only_what_the_buffer_needs():
    source = CountingSource(100_000)
    dm = PromptDataModule(source, prompts_per_step=4, streaming=True, shuffle_buffer=32)
    dm.setup("fit")
    assert "train" not in dm.splits  # nothing held in memory
    source.read = 0
    next(iter(dm.train_dataloader()))
    assert source.read <= 32 + 4


BAD = {
    2: '{"prompt": "x", "answer": ',
    4: '{"answer": "1"}',
    6: '{"prompt": "   ", "answer": "1"}',
    8: '{"prompt": "x", "answer": ""}',
}


@pytest.mark.parametrize("streaming", [False, True])
def test_bad_rows_are_skipped_and_counted_when_configured(tmp_path, streaming, caplog):
    path = write_prompts(tmp_path / "train.jsonl", 20, BAD)
    dm = PromptDataModule(FileSource(train=path), prompts_per_step=4, streaming=streaming, skip_bad_rows=True)
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
        ids = ids_of(dm.train_dataloader())
    assert len(ids) == 20 and len(set(ids)) == 20
    assert dm.skipped_rows == {"train": 4}
    assert re.search(rf"{re.escape(path)}, line 2: malformed JSON", caplog.text)


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        (2, "line 2: malformed JSON"),
        (4, "line 4: field 'prompt' \\(prompt_field\\) is missing"),
        (6, "line 6: field 'prompt' \\(prompt_field\\) is an empty prompt"),
        (8, "line 8: field 'answer' \\(answer_field\\) is an empty reference"),
    ],
)
def test_bad_rows_raise_naming_file_line_and_field_by_default(tmp_path, line, pattern):
    path = write_prompts(tmp_path / "train.jsonl", 20, {line: BAD[line]})
    dm = PromptDataModule(FileSource(train=path), prompts_per_step=4, streaming=True)
    dm.setup("fit")
    with pytest.raises(ValueError, match=re.escape(path) + ", " + pattern):
        ids_of(dm.train_dataloader())


def test_stream_validates_rank():
    with pytest.raises(ValueError, match="rank=2 must be in 0..world_size-1"):
        PromptStream([], 4, rank=2, world_size=2)


def test_refill_position_per_rank_is_restored_for_this_rank(tmp_path):
    dm = stream_dm(tmp_path)
    dm.load_state_dict({"epoch": 0, "prompts": 0, "refill_drawn": [5, 9]})  # as written by two ranks
    expected = [r["id"] for r in islice(dm.train_dataset(salt=1).cycle(), 8)]
    assert dm.refill(3).ids == expected[5:8]  # no trainer: rank 0


def test_a_position_saved_with_other_data_settings_is_refused_naming_each(tmp_path):
    dm = stream_dm(tmp_path)
    state = dm.state_dict()
    assert state["settings"] == {"seed": 0, "streaming": True, "shuffle_buffer": 8, "world_size": 1}
    state["settings"] |= {"world_size": 2, "seed": 3}
    with pytest.raises(ValueError, match="data.seed: checkpoint 3, this run 0; data.world_size: checkpoint 2, this run 1"):
        dm.load_state_dict(state)


def test_a_position_saved_with_another_prompts_per_step_continues_at_the_same_prompt(tmp_path):
    first = stream_dm(tmp_path, prompts_per_step=4)
    order = [r["id"] for r in first.train_dataset().ordered(0)]
    for batch in list(first.train_dataloader())[:3]:
        first.on_before_batch_transfer(batch, 0)  # three steps of 4 prompts
    second = stream_dm(tmp_path, prompts_per_step=5)
    second.load_state_dict(first.state_dict())
    assert [b.ids for b in second.train_dataloader()] == [order[12:17], order[17:22], order[22:27], order[27:32],
                                                          order[32:37]]


def test_a_position_from_before_prompts_were_counted_is_read_in_batches(tmp_path):
    dm = stream_dm(tmp_path, prompts_per_step=4)
    dm.load_state_dict({"epoch": 0, "batches": 3, "refill_drawn": 0})
    order = [r["id"] for r in dm.train_dataset().ordered(0)]
    assert next(iter(dm.train_dataloader())).ids == order[12:16]


def test_a_position_in_memory_saved_on_more_processes_continues_after_every_prompt_they_consumed(tmp_path, caplog):
    dm = stream_dm(tmp_path, streaming=False)
    order = [r["id"] for r in dm.train_dataset().ordered(0)]
    dm.load_state_dict({"epoch": 0, "prompts": 4, "world_size": 2, "refill_drawn": [0, 0]})  # 2 ranks x 4
    assert next(iter(dm.train_dataloader())).ids == order[8:12]
    dm._world_size = lambda: 3  # resumed on 3 processes: 8 prompts do not divide among 3 ranks
    dm.load_state_dict({"epoch": 0, "prompts": 4, "world_size": 2, "refill_drawn": [0, 0]})
    assert dm._prompts == 2 and "2 prompts of this epoch are seen again" in caplog.text
