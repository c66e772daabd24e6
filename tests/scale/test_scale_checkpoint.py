"""Atomic checkpoint writes and the configuration check on resume."""

from __future__ import annotations

from unittest import mock

import lightning as L
import pytest
import torch

from lit_grpo import Sign
from lit_grpo.checkpoint import AtomicCheckpointIO, check_fingerprint, remove_unused_log_dirs
from lit_grpo.lora import LoraSettings
from tests.helpers import tiny_data, tiny_module, tiny_trainer


def _torn_save(obj, f, *args, **kwargs):
    f.write(b"half a checkpoint")
    raise OSError("disk full")


def test_a_crash_while_saving_leaves_the_previous_checkpoint_whole(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"global_step": 1, "w": torch.ones(3)}, path)
    with mock.patch("torch.save", side_effect=_torn_save), pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"global_step": 2, "w": torch.zeros(3)}, path)
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind
    (tmp_path / ".last.ckpt.abc.tmp").write_bytes(b"left by a killed save")
    io.save_checkpoint({"global_step": 3}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert torch.load(path, weights_only=True)["global_step"] == 3


def test_a_crash_while_saving_during_fit_keeps_last_ckpt(tmp_path, sft_model_path):
    L.seed_everything(0)
    saves = {"n": 0}
    real_save = torch.save

    def save_then_crash(obj, f, *args, **kwargs):
        saves["n"] += 1
        if saves["n"] == 3:
            return _torn_save(obj, f)
        return real_save(obj, f, *args, **kwargs)

    ckpt = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ckpt", save_last=True, save_top_k=0, every_n_train_steps=1
    )
    trainer = tiny_trainer(
        tmp_path, max_steps=4, enable_checkpointing=True, callbacks=[ckpt], plugins=[AtomicCheckpointIO()]
    )
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    with mock.patch("torch.save", side_effect=save_then_crash), pytest.raises(OSError, match="disk full"):
        trainer.fit(tiny_module(sft_model_path), datamodule=tiny_data())
    assert torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)["global_step"] == 2


def test_an_incompatible_checkpoint_says_what_differs(tmp_path, sft_model_path):
    L.seed_everything(0)
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tiny_trainer(tmp_path, max_steps=1, enable_checkpointing=True, callbacks=[ckpt]).fit(
        tiny_module(sft_model_path), datamodule=tiny_data()
    )
    other = tiny_module(sft_model_path, group_size=8, estimator=Sign(), aggregation="seq-mean-token-mean")
    with pytest.raises(ValueError, match="different configuration") as info:
        tiny_trainer(tmp_path, max_steps=2).fit(
            other, datamodule=tiny_data(seed=5), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt")
        )
    message = str(info.value)  # the module's settings and the data position's, in one refusal
    assert "data.seed: checkpoint 0, this run 5" in message
    assert "group_size: checkpoint 4, this run 8" in message
    assert "estimator: checkpoint GRPO(" in message and "this run Sign(" in message
    assert "aggregation: checkpoint token-mean, this run seq-mean-token-mean" in message
    assert "model:" not in message and "lora:" not in message  # only what differs is listed


def test_fingerprint_lists_lora_changes():
    saved = {"model": "m", "lora": None}
    with pytest.raises(ValueError, match=r"lora: checkpoint None, this run \{'r': 8"):
        check_fingerprint(saved, {"model": "m", "lora": vars(LoraSettings(r=8))})
    check_fingerprint(saved, dict(saved))  # equal: no error


def test_only_a_logger_folder_with_nothing_logged_is_removed(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    empty, logged, other = tmp_path / "version_0", tmp_path / "version_1", tmp_path / "version_2"
    for folder in (empty, logged, other):
        SummaryWriter(folder).close()  # the file-version header only
        (folder / "config.yaml").write_text("seed_everything: 0\n")
    with SummaryWriter(logged) as writer:
        writer.add_scalar("train/loss", 1.0, 0)
    (other / "last.ckpt").write_bytes(b"")
    assert remove_unused_log_dirs([empty, logged, other, tmp_path / "never_made"]) == [empty]
    assert not empty.exists() and logged.is_dir() and (other / "last.ckpt").is_file()
