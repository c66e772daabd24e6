"""Checkpoints that survive crashes: atomic writes, a clean stop on Ctrl-C, exact resume, config checks.

A resumed run reproduces the uninterrupted one exactly on the CPU: parameters, optimizer and scheduler
(Lightning), the data position (``PromptDataModule.state_dict``), callback state (Lightning), and the
randomness, because :meth:`GRPOModule.on_train_batch_start` reseeds torch, numpy and ``random`` from
``(rollout seed, step, rank)`` before every step (:func:`seed_step`) and the rollout seed is saved here.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.plugins.io import TorchCheckpointIO

logger = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file beside its target, fsyncs it and renames it into place.

    A crash or a kill while saving leaves the previous file (e.g. ``last.ckpt``) whole; a leftover
    temporary file (``.<name>.*.tmp``) is removed by the next save. Remote paths (``s3://``...) use
    Lightning's own writer. The default plugin of ``lit-grpo`` runs. With
    ``ModelParallelStrategy(save_distributed_checkpoint=True)`` Lightning writes a folder of shards itself,
    without this plugin; ``save_distributed_checkpoint: false`` writes one file through it.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options (got {storage_options!r})")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not possible on every platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class SaveOnInterrupt(Callback):
    """Ctrl-C (SIGINT) finishes the current training step, writes a checkpoint and stops ``fit``.

    The checkpoint is written between steps, so it is as clean as a scheduled one and a run resumed from
    it (``ckpt_path=last``) goes on exactly. A second Ctrl-C interrupts at once (no checkpoint). With
    several processes the ranks agree to stop after the same step. Writes no metrics.

    Args:
        dirpath: Where ``last.ckpt`` is written; null: the folder of the trainer's ``ModelCheckpoint``,
            else ``<default_root_dir>/checkpoints``.
        filename: File name of the checkpoint.
    """

    def __init__(self, dirpath: str | None = None, filename: str = "last.ckpt") -> None:
        self.dirpath, self.filename = dirpath, filename
        self.requested = False
        self.saved_path: Path | None = None
        self._previous: Any = None
        self._installed = False

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.requested = False
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        except ValueError:  # not the main thread: signals cannot be caught here
            self._installed = False

    def _restore(self) -> None:
        signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        self._restore()  # a second Ctrl-C interrupts at once
        logger.warning(
            "Ctrl-C: finishing this step, then saving a checkpoint (Ctrl-C again to abort at once)"
        )

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.strategy.reduce_boolean_decision(self.requested, all=False):
            return
        self.saved_path = self._path(trainer)
        trainer.save_checkpoint(self.saved_path)
        trainer.should_stop = True
        logger.warning(
            "interrupted after step %d; checkpoint written to %s", trainer.global_step, self.saved_path
        )

    def _path(self, trainer: Trainer) -> Path:
        if self.dirpath is not None:
            return Path(self.dirpath) / self.filename
        checkpoint = trainer.checkpoint_callback
        folder = getattr(checkpoint, "dirpath", None) or Path(trainer.default_root_dir) / "checkpoints"
        return Path(folder) / self.filename

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._installed and signal.getsignal(signal.SIGINT) == self._handle:
            self._restore()
        self._installed = False


# ---- the GRPO module's own checkpoint state ----------------------------------------------------------
def seed_step(seed: int, step: int, rank: int) -> None:
    """Seed torch (every device), numpy and ``random`` for one training step of one rank."""
    state = np.random.SeedSequence([seed % 2**63, step, rank]).generate_state(2, dtype=np.uint32)
    value = int(state[0]) << 32 | int(state[1])
    torch.manual_seed(value)
    np.random.seed(int(state[0]))
    random.seed(value)


def rng_states() -> dict[str, Any]:
    """This process's global random states (torch CPU and CUDA, numpy, ``random``)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (
            name,
            keys.tolist(),
            int(pos),
            int(has_gauss),
            float(gauss),
        ),  # plain types: weights_only loads
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    name, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def fingerprint(module: Any) -> dict[str, Any]:
    """The settings a checkpoint's state depends on: the model, group size, estimator, aggregation, LoRA,
    and the parameters' dtype (resumed in another dtype, the weights and optimizer moments would be
    silently rounded or widened). Logging, time limits and other settings that change neither the saved
    state nor the update are not in it, nor is the data position's meaning (the DataModule checks that).

    The model is compared as :func:`model_identity`: a local directory by its resolved path, so that
    ``./m``, ``m/`` and ``/abs/m`` are the same model."""
    return {
        "model": model_identity(module.model_name),
        "group_size": module.group_size,
        "estimator": repr(module.estimator),
        "aggregation": module.aggregation,
        "lora": asdict(module.lora) if module.lora is not None else None,
        "dtype": module.dtype_name,
    }


def model_identity(model: str) -> str:
    """A local model directory as its absolute, resolved path (symbolic links followed); a hub id as it is."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any]) -> None:
    """Raise a ``ValueError`` naming every setting that differs between a checkpoint and this run."""
    if isinstance(saved.get("model"), str):  # written as given by checkpoints of earlier versions
        saved = {**saved, "model": model_identity(saved["model"])}
    differ = [
        f"{k}: checkpoint {_show(saved[k])}, this run {_show(current[k])}"
        for k in current
        if k in saved and saved[k] != current[k]
    ]
    if differ:
        raise ValueError(
            "the checkpoint was written with a different configuration, so its state does not fit this run: "
            + "; ".join(differ)
            + ". Resume with the checkpoint's settings, or start a new run from exported weights "
            "(callbacks.SavePretrained) to change them."
        )


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` with one process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [obj]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def save_module_state(module: Any) -> dict[str, Any]:
    """The GRPO module's part of a checkpoint (called on every rank: the random states are gathered)."""
    estimator_state = getattr(module.estimator, "state_dict", None)
    return {
        "fingerprint": fingerprint(module),
        "nonfinite_steps": module.nonfinite_steps,
        "rollout_seed": module.rollout_seed,
        "rng": gather_objects(rng_states()),
        "estimator": estimator_state() if callable(estimator_state) else None,
    }


def load_module_state(module: Any, state: dict[str, Any], rank: int) -> None:
    """Check the fingerprint, then restore the counters, seed, random states and estimator state."""
    if "fingerprint" in state:
        check_fingerprint(state["fingerprint"], fingerprint(module))
    module.nonfinite_steps = state.get("nonfinite_steps", 0)
    module.rollout_seed = state.get("rollout_seed", module.rollout_seed)
    rng = state.get("rng") or []
    if rng:
        set_rng_states(rng[rank] if rank < len(rng) else rng[0])
    if state.get("estimator") is not None and hasattr(module.estimator, "load_state_dict"):
        module.estimator.load_state_dict(state["estimator"])
