"""Few-step GRPO runs of the committed tiny policy for the multi-process and resume tests.

Run as a script (``torchrun --nproc_per_node 2 tests/scale/train_tiny.py parallel OUT``, the same on two
torchrun or srun "nodes" of one process each (tests/scale/test_scale_nodes.py), or
``python tests/scale/train_tiny.py kill OUT --kill-at 3``) or imported by the tests for the one-process
references. Every run writes ``params.pt`` (the full policy state dict) and ``metrics.jsonl`` (one line
of logged scalars per step) under its own folder.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository for tests.helpers

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from lit_grpo import GRPOModule, PromptBatch, PromptDataModule, RewardFunction, SyntheticArithmetic  # noqa: E402
from lit_grpo.callbacks.export import SavePretrained  # noqa: E402
from lit_grpo.checkpoint import AtomicCheckpointIO  # noqa: E402
from lit_grpo.lora import LoraSettings  # noqa: E402
from lit_grpo.losses import PPOClip  # noqa: E402
from lit_grpo.parallel import full_state_dict, gathered, release_process_group  # noqa: E402
from lit_grpo.rollout import AsyncRollouts  # noqa: E402
from lit_grpo.rollout.base import RolloutEngine  # noqa: E402
from lit_grpo.rollout.weights import full_weights, merged_adapters  # noqa: E402
from lit_grpo.types import RewardOutput, Rollouts  # noqa: E402
from tests.helpers import grouped  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "assets" / "tiny-arith-sft")
LOGGED = (
    "rollout/reward_mean",
    "rollout/reward_std",
    "rollout/len_mean",
    "rollout/prompts_drawn",
    "train/loss",
    "train/clip_frac",
    "train/entropy",
    "train/grad_norm",
    "train/kl",
    "train/ratio_mean",
    "train/ratio_max",
    "train/policy_kl",
    "perf/elided_frac",
)


def completion(prompt: str, j: int) -> str:
    """The ``j``-th scripted completion of ``prompt``: a number that depends on the prompt text only."""
    return str((zlib.crc32(prompt.encode()) + 37 * j) % 10 ** (1 + j % 3))


class ScriptedEngine(RolloutEngine):
    """Deterministic rollouts: the same completions for a prompt on any rank, at any world size."""

    def bind(self, policy, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts, n, sampling) -> Rollouts:
        tok = self.tokenizer
        texts = [completion(p, j) for p in prompts for j in range(n)]
        enc = tok(prompts, padding=True, padding_side="left", return_tensors="pt")
        rows = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
        mask = torch.arange(width)[None, :] < torch.tensor([len(r) for r in rows])[:, None]
        return Rollouts(
            enc["input_ids"].repeat_interleave(n, 0),
            enc["attention_mask"].repeat_interleave(n, 0).bool(),
            ids,
            mask,
            torch.zeros(ids.shape),
            texts,
            torch.zeros(len(rows), dtype=torch.bool),
            n,
        )


class DigitReward(RewardFunction):
    """A reward in [0, 1] that varies within every group: the digit sum of the completion, mod 5, over 4."""

    def __call__(self, completions, references, **columns) -> RewardOutput:
        return RewardOutput(
            torch.tensor([(sum(int(c) for c in s if c.isdigit()) % 5) / 4 for s in completions])
        )


class SkewedReward(DigitReward):
    """The digit reward, but every completion of a prompt with an even answer scores 1 (a degenerate group)."""

    def __call__(self, completions, references, **columns) -> RewardOutput:
        out = super().__call__(completions, references, **columns)
        even = torch.tensor([int(r) % 2 == 0 for r in references])
        return RewardOutput(torch.where(even, 1.0, out.scores))


FILTER = {"reward": SkewedReward(), "filter_degenerate": True, "max_refill_batches": 2, "num_iterations": 1}


class SecondRankConstant(DigitReward):
    """The digit reward, but every completion of the second rank's prompts scores 1, so that rank has nothing to
    train: under two processes all of rank 1's; in one process over both ranks' prompts (:class:`MergedRanks`
    puts rank 1's last) the second half."""

    def __call__(self, completions, references, **columns) -> RewardOutput:
        scores = super().__call__(completions, references, **columns).scores.clone()
        dist = torch.distributed
        if dist.is_initialized() and dist.get_world_size() > 1:
            if dist.get_rank() == 1:
                scores[:] = 1.0
        else:
            scores[len(scores) // 2 :] = 1.0
        return RewardOutput(scores)


#: Zero-advantage elision (no KL) with micro-batches and frozen old log-probs, rank 1 left with nothing to train.
ELIDE = {"reward": SecondRankConstant(), "loss": PPOClip(), "micro_batch_size": 3}


class MergedRanks(PromptDataModule):
    """One process that sees, at every step, the prompts that ``ranks`` processes see together."""

    def __init__(self, source, prompts_per_step: int, ranks: int) -> None:
        super().__init__(source, prompts_per_step=prompts_per_step)
        self.ranks = ranks

    def train_dataloader(self) -> DataLoader:
        streams = [self.train_dataset(rank=r, world_size=self.ranks) for r in range(self.ranks)]
        batches = [PromptBatch.concat(list(parts)) for parts in zip(*streams, strict=False)]
        return DataLoader(batches, batch_size=None, collate_fn=lambda batch: batch)


class Record(L.Callback):
    """Appends the logged scalars of every step to ``metrics.jsonl`` (rank 0), flushed at once, and the
    number of groups each rank trained on to ``groups.rank<r>.txt``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if "rollout" not in outputs:  # an asynchronous engine's pipeline filling: nothing trained
            return
        with (self.path.parent / f"groups.rank{trainer.global_rank}.txt").open("a") as f:
            f.write(f"{len(outputs['rollout'].batch)}\n")
        if trainer.is_global_zero:
            row = {k: float(v) for k, v in trainer.callback_metrics.items() if k in LOGGED}
            with self.path.open("a") as f:
                f.write(json.dumps({"step": trainer.global_step, **row}) + "\n")


class Layout(L.Callback):
    """Writes what Lightning and torch.distributed report about this process to ``layout.rank<r>.json`` once
    training starts: node rank, global and local rank, world size, nodes and devices, the cluster environment."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_start(self, trainer, pl_module) -> None:
        dist = torch.distributed
        row = {
            "node_rank": trainer.node_rank,
            "global_rank": trainer.global_rank,
            "local_rank": trainer.local_rank,
            "world_size": trainer.world_size,
            "num_nodes": trainer.num_nodes,
            "num_devices": trainer.num_devices,
            "dist_rank": dist.get_rank() if dist.is_initialized() else None,
            "dist_world_size": dist.get_world_size() if dist.is_initialized() else None,
            "environment": type(trainer.strategy.cluster_environment).__name__,
            "group_rank": os.environ.get("GROUP_RANK"),
        }
        (self.folder / f"layout.rank{trainer.global_rank}.json").write_text(json.dumps(row))


def launch_layout() -> tuple[int, int]:
    """``(devices, num_nodes)`` for the Trainer from the launcher's environment, in Lightning's order of
    detection: torchrun (``LOCAL_WORLD_SIZE`` processes on each of ``WORLD_SIZE / LOCAL_WORLD_SIZE`` nodes),
    then srun (``SLURM_NTASKS_PER_NODE`` on each of ``SLURM_NNODES``); else 2 processes that Lightning starts
    itself on one node. Lightning does not infer them: under a torchrun of 2 nodes x 1 process, ``devices=1,
    num_nodes=1`` stops DDP (the product does not match the world size), while ``devices=2, num_nodes=1``, and
    for FSDP2 (``ModelParallelStrategy`` skips that check) ``devices=1, num_nodes=1`` too, train with
    ``trainer.num_nodes`` 1 (ranks and world size come from the environment, so the data split is right)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if TorchElasticEnvironment.detect():
        local, world = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["WORLD_SIZE"])
    elif SLURMEnvironment.detect():
        local, world = int(os.environ["SLURM_NTASKS_PER_NODE"]), int(os.environ["SLURM_NTASKS"])
    else:
        return 2, 1
    if world % local:
        raise ValueError(f"a world of {world} processes is not a whole number of nodes of {local}: Lightning "
                         "needs the same number of processes on every node")
    return local, world // local


class KillAt(L.Callback):
    """SIGKILL this process in the middle of the step that follows ``step`` (before its optimizer step)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class CPUFSDPStrategy(FSDPStrategy):
    """Lightning's ``FSDPStrategy`` (FSDP1) on CPU processes with gloo. Lightning accepts that strategy only
    with a GPU accelerator, a check made on its exact type; this subclass runs the same strategy code on
    the CPU, so the FSDP1 path is tested on a machine without GPUs. One difference: torch's FSDP1 full
    state dict with ``offload_to_cpu`` (Lightning's setting) crashes when the compute device is the CPU,
    so the checkpoints here gather the full state without offloading (its tensors are on the CPU anyway).
    Not exercised here: resuming the optimizer state exactly. On a CPU compute device torch's FSDP1 full
    optimizer state dict returns ``exp_avg`` equal to ``exp_avg_sq`` (both views of one gather buffer, which
    only the ``.cpu()`` copy from a GPU separates), so a CPU FSDP1 checkpoint's Adam moments are wrong."""

    def lightning_module_state_dict(self):
        with _full_state_without_offload():
            return super().lightning_module_state_dict()

    def optimizer_state(self, optimizer):
        with _full_state_without_offload():
            return super().optimizer_state(optimizer)

    def load_checkpoint(self, checkpoint_path, weights_only=None):
        with _full_state_without_offload():
            return super().load_checkpoint(checkpoint_path, weights_only=weights_only)


@contextmanager
def _full_state_without_offload():
    from lightning.pytorch.strategies import fsdp
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def context(module, world_size, rank0_only=True):
        return FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT, FullStateDictConfig(),
                                    FullOptimStateDictConfig())

    original, fsdp._get_full_state_dict_context = fsdp._get_full_state_dict_context, context
    try:
        yield
    finally:
        fsdp._get_full_state_dict_context = original


def source(num_train: int = 32) -> SyntheticArithmetic:
    return SyntheticArithmetic(num_train=num_train, num_val=4, num_test=4, max_operand=20, seed=0)


def module(engine: str = "scripted", lora: bool = False, **kwargs) -> GRPOModule:
    options = {
        "group_size": 4,
        "max_new_tokens": 4,
        "lr": 1e-4,
        "loss": PPOClip(beta=0.05),
        "num_iterations": 2,
        "reward": DigitReward(),
        "engine": {"scripted": ScriptedEngine, "hf": lambda: None,
                   "async1": lambda: AsyncRollouts(ScriptedEngine(), max_staleness=1)}[engine](),
        "lora": LoraSettings(r=4, alpha=8, target_modules=["q_proj", "v_proj"]) if lora else None,
    }
    return GRPOModule(model=MODEL, **grouped(**{**options, **kwargs}))


def trainer(out: Path, steps: int, strategy="auto", devices: int = 1, callbacks=(), **kwargs) -> L.Trainer:
    out.mkdir(parents=True, exist_ok=True)
    return L.Trainer(
        accelerator="cpu", devices=devices, strategy=strategy, max_steps=steps, logger=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, default_root_dir=str(out),
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        callbacks=[Record(out / "metrics.jsonl"), *callbacks], **kwargs,
    )  # fmt: skip


def save_params(trainer_: L.Trainer, grpo: GRPOModule, out: Path) -> None:
    state = full_state_dict(grpo.policy)  # every rank (FSDP2 gathers)
    if trainer_.is_global_zero:
        torch.save({k: v.detach().clone() for k, v in state.items()}, out / "params.pt")


def save_streamed(trainer_: L.Trainer, grpo: GRPOModule, out: Path) -> None:
    """What the vLLM weight sync streams from the sharded policy (adapters merged), as ``streamed.pt``."""
    with gathered(grpo.policy) as whole, merged_adapters(whole) as plain:  # every rank: collectives
        streamed = {k: v.detach().clone() for k, v in full_weights(plain)}
    if trainer_.is_global_zero:
        torch.save(streamed, out / "streamed.pt")


def run_parallel(out: Path, steps: int, only: list[str] | None = None) -> None:
    """Under torchrun or srun with 2 processes, on one node or one on each of two (:func:`launch_layout`): DDP,
    FSDP2, FSDP2 + LoRA + gradient checkpointing, FSDP2 with sampled generation, FSDP2 with ``filter_degenerate``
    (ranks keep different numbers of groups before they agree), FSDP1 (``FSDPStrategy``) plain, with LoRA and with
    sampled generation in bf16 mixed precision, and DDP and FSDP2 with zero-advantage elision where rank 1 has
    nothing to train. Each run's folder also gets every rank's :class:`Layout`."""
    devices, nodes = launch_layout()
    fsdp2 = {"data_parallel_size": devices * nodes, "tensor_parallel_size": 1, "save_distributed_checkpoint": False}
    runs = {  # name: (strategy, module options, optimizer steps)
        "ddp": (lambda: DDPStrategy(process_group_backend="gloo"), {}, steps),
        "fsdp2": (lambda: ModelParallelStrategy(**fsdp2), {}, steps),
        "fsdp2_lora": (
            lambda: ModelParallelStrategy(**fsdp2),
            {"lora": True, "gradient_checkpointing": True},
            steps,
        ),
        "fsdp2_hf": (lambda: ModelParallelStrategy(**fsdp2), {"engine": "hf", "max_new_tokens": 6}, 2),
        "fsdp2_filter": (lambda: ModelParallelStrategy(**fsdp2), FILTER, 2),
        "fsdp1": (lambda: CPUFSDPStrategy(process_group_backend="gloo"), {}, steps),
        "fsdp1_lora": (
            lambda: CPUFSDPStrategy(process_group_backend="gloo"),
            {"lora": True, "gradient_checkpointing": True},
            steps,
        ),
        "fsdp1_hf": (lambda: CPUFSDPStrategy(process_group_backend="gloo"), {"engine": "hf", "max_new_tokens": 6}, 2),
        "ddp_elide": (lambda: DDPStrategy(process_group_backend="gloo"), ELIDE, steps),
        "ddp_async1": (lambda: DDPStrategy(process_group_backend="gloo"), {"engine": "async1"}, steps),
        "fsdp2_elide": (lambda: ModelParallelStrategy(**fsdp2), ELIDE, steps),
    }
    for name, (strategy, options, max_steps) in runs.items():
        if only and name not in only:
            continue
        L.seed_everything(0)
        folder = out / name
        callbacks = []
        if name in ("ddp", "fsdp2", "fsdp2_lora", "fsdp1", "fsdp1_lora"):
            checkpoint = ModelCheckpoint(folder / "ckpt", save_last=True, save_top_k=0, every_n_train_steps=1)
            callbacks = [checkpoint, SavePretrained(str(folder / "export"))]
        grpo = module(**options)
        precision = "bf16-mixed" if name == "fsdp1_hf" else "32-true"  # FSDP1 mixed precision while generating
        fit = trainer(
            folder, max_steps, strategy(), devices=devices, num_nodes=nodes, callbacks=[*callbacks, Layout(folder)],
            plugins=[AtomicCheckpointIO()], precision=precision,
        )
        fit.fit(grpo, datamodule=PromptDataModule(source(), prompts_per_step=2))
        save_params(fit, grpo, folder)
        if name.endswith("_lora"):
            save_streamed(fit, grpo, folder)
    for name in ("ddp", "fsdp2"):  # resumed at 2 ranks from the checkpoint at step `steps`
        if only and f"{name}_resumed" not in only:
            continue
        L.seed_everything(0)
        folder, grpo = out / f"{name}_resumed", module()
        fit = trainer(folder, steps + 2, runs[name][0](), devices=devices, num_nodes=nodes)
        fit.fit(grpo, datamodule=PromptDataModule(source(), prompts_per_step=2),
                ckpt_path=str(out / name / "ckpt" / "last.ckpt"))
        save_params(fit, grpo, folder)


def run_single(
    out: Path,
    steps: int,
    kill_at: int | None = None,
    resume: str | None = None,
    merged_ranks: int = 0,
    **options,
) -> GRPOModule:
    """One process; ``merged_ranks``: the global batch of that many ranks with 2 prompts each."""
    L.seed_everything(0)
    grpo = module(**options)
    callbacks = [ModelCheckpoint(dirpath=out / "ckpt", save_last=True, save_top_k=0, every_n_train_steps=1)]
    if kill_at is not None:
        callbacks.append(KillAt(kill_at))
    data = (
        MergedRanks(source(), 2, merged_ranks)
        if merged_ranks
        else PromptDataModule(source(), prompts_per_step=2)
    )
    fit = trainer(out, steps, callbacks=callbacks, plugins=[AtomicCheckpointIO()])
    fit.fit(grpo, datamodule=data, ckpt_path=resume)
    save_params(fit, grpo, out)
    return grpo


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["parallel", "kill"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, help="parallel mode: run only these configurations")
    parser.add_argument("--steps-per-generation", type=int, default=1, help="kill mode: optimizer steps per batch")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        if args.mode == "parallel":
            run_parallel(args.out, args.steps, args.only)
        else:
            run_single(args.out, args.steps, kill_at=args.kill_at, engine="hf", loss=PPOClip(), num_iterations=1,
                       steps_per_generation=args.steps_per_generation)
    finally:
        release_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
