import lightning as L
import pytest
import torch

from lit_grpo.data import FileSource, PromptDataModule, SyntheticArithmetic
from lit_grpo.types import PromptBatch


def make_dm(num_train=50, num_val=20, **kwargs):
    dm = PromptDataModule(SyntheticArithmetic(num_train=num_train, num_val=num_val, num_test=7), **kwargs)
    dm.setup("fit")
    return dm


def train_ids(dm):
    return [i for batch in dm.train_dataloader() for i in batch.ids]


def test_batch_sizes():
    dm = make_dm(prompts_per_step=8, val_batch_size=8)
    batches = list(dm.train_dataloader())
    assert all(isinstance(b, PromptBatch) for b in batches)
    assert [len(b) for b in batches] == [8] * 6  # 50 prompts, the last 2 dropped
    assert [len(b) for b in dm.val_dataloader()] == [8, 8, 4]
    assert [len(b) for b in make_dm(val_batch_size=8, max_val_prompts=10).val_dataloader()] == [8, 2]
    dm.setup("test")
    assert [len(b) for b in dm.test_dataloader()] == [7]


def test_batches_carry_the_records():
    dm = make_dm(prompts_per_step=4)
    by_id = {r["id"]: r for r in dm.splits["train"]}
    batch = next(iter(dm.train_dataloader()))
    assert all(i.startswith("train-") for i in batch.ids)
    assert batch.prompts == [by_id[i]["prompt"] for i in batch.ids]
    assert batch.references == [by_id[i]["reference"] for i in batch.ids]


def test_training_order_depends_on_the_seed_only():
    assert train_ids(make_dm(seed=1)) == train_ids(make_dm(seed=1))
    assert train_ids(make_dm(seed=1)) != train_ids(make_dm(seed=2))


def epoch_ids(dm, epoch):
    stream = dm.train_dataset()
    stream.epoch = epoch
    return [i for b in stream for i in b.ids]


def test_each_epoch_is_a_new_deterministic_order():
    dm = make_dm(num_train=48, prompts_per_step=8)
    epoch0, epoch1 = epoch_ids(dm, 0), epoch_ids(dm, 1)
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1)
    assert epoch_ids(make_dm(num_train=48, prompts_per_step=8), 1) == epoch1


def test_in_memory_order_is_that_of_distributed_sampler():
    # one process: the order of torch's DistributedSampler (seed + epoch), so runs keep their order
    dm = make_dm(num_train=48, prompts_per_step=8, seed=3)
    records = dm.splits["train"]
    for epoch in (0, 1):
        sampler = torch.utils.data.DistributedSampler(records, num_replicas=1, rank=0, seed=3)
        sampler.set_epoch(epoch)
        assert epoch_ids(dm, epoch) == [records[i]["id"] for i in sampler]


def test_val_order_is_fixed():
    dm = make_dm(val_batch_size=6)
    first = [i for b in dm.val_dataloader() for i in b.ids]
    assert first == [f"val-{k}" for k in range(20)]
    assert [i for b in dm.val_dataloader() for i in b.ids] == first


def test_options_are_validated():
    with pytest.raises(ValueError, match="prompts_per_step=0 must be >= 1"):
        PromptDataModule(SyntheticArithmetic(), prompts_per_step=0)
    with pytest.raises(ValueError, match="max_val_prompts=0"):
        PromptDataModule(SyntheticArithmetic(), max_val_prompts=0)
    with pytest.raises(ValueError, match="has 10 prompts, fewer than prompts_per_step=16"):
        make_dm(num_train=10, prompts_per_step=16)


def test_unconfigured_val_split_gives_no_val_loader(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "p", "answer": "a"}\n')
    dm = PromptDataModule(FileSource(train=str(path)), prompts_per_step=1)
    dm.setup("fit")
    assert dm.val_dataloader() == []
    with pytest.raises(RuntimeError, match="call setup"):
        PromptDataModule(SyntheticArithmetic()).refill(1)


def test_refill_is_deterministic_and_cycles_over_the_training_set():
    dm = make_dm(num_train=30)
    ids = [i for _ in range(3) for i in dm.refill(10).ids] + dm.refill(30).ids
    assert sorted(ids[:30]) == sorted(f"train-{k}" for k in range(30))  # one full pass
    assert sorted(ids[30:]) == sorted(ids[:30]) and ids[30:] != ids[:30]  # the next, reshuffled
    other = make_dm(num_train=30)
    assert other.refill(60).ids == ids
    assert ids[:16] != next(iter(make_dm(num_train=30).train_dataloader())).ids  # independent stream


def test_refill_resumes_from_the_state_dict():
    dm = make_dm()
    dm.refill(37)
    state = dm.state_dict()
    expected = dm.refill(25).ids
    resumed = make_dm()
    resumed.load_state_dict(state)
    assert resumed.refill(25).ids == expected


def test_refill_zero_keeps_the_columns(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "p", "answer": "a", "level": 3}\n')
    dm = PromptDataModule(FileSource(train=str(path), extra_fields=["level"]), prompts_per_step=1)
    dm.setup("fit")
    empty = dm.refill(0)
    assert len(empty) == 0 and empty.columns == {"level": []}
    assert PromptBatch.concat([dm.refill(1), empty]).columns == {"level": [3]}


class RecordIds(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[str]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch.ids)
        self.trainer.datamodule.refill(3)
        return (self.w**2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_trainer_reshuffles_epochs_and_checkpoints_the_refill_position(tmp_path):
    dm = PromptDataModule(SyntheticArithmetic(num_train=12, num_val=4, num_test=0), prompts_per_step=4)
    model = RecordIds()
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    epochs = [sum(model.seen[:3], []), sum(model.seen[3:], [])]
    assert len(model.seen) == 6 and sorted(epochs[0]) == sorted(epochs[1]) and epochs[0] != epochs[1]
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    ckpt = torch.load(tmp_path / "last.ckpt", weights_only=False)
    assert ckpt["PromptDataModule"] == {
        "epoch": 1, "prompts": 12, "world_size": 1, "refill_drawn": 18,
        "settings": {"seed": 0, "streaming": False, "train_prompts": 12},
    }  # fmt: skip
