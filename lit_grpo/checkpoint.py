"""Checkpoints that survive crashes: atomic writes, a clean stop on Ctrl-C and pre-emption signals, exact
resume, config checks.

A resumed run reproduces the uninterrupted one exactly on the CPU: parameters, optimizer and scheduler
(Lightning), the data position (``PromptDataModule.state_dict``), callback state (Lightning), and the
randomness, because :meth:`GRPOModule.on_train_batch_start` reseeds torch, numpy and ``random`` from
``(rollout seed, step, rank)`` before every step (:func:`~lit_grpo.parallel.seed_step`) and saves the rollout
seed, its counters and the random states in :meth:`GRPOModule.on_save_checkpoint` with the helpers below.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import signal
import tempfile
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lit_grpo.checks import differences, require, require_folder
from lit_grpo.models.sources import bundled_model

logger = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file beside its target, fsyncs it and renames it into place.

    A crash or a kill while saving leaves the previous file (e.g. ``last.ckpt``) whole; a leftover
    temporary file (``.<name>.*.tmp``) is removed by the next save. Remote paths (``s3://``...) use
    Lightning's own writer. The default plugin of ``lit-grpo`` runs. With
    ``ModelParallelStrategy(save_distributed_checkpoint=True)`` Lightning writes a folder of shards itself,
    without this plugin; ``save_distributed_checkpoint: false`` writes one file through it. A write that fails
    (a full disk, a read-only folder) raises a :class:`CheckpointWriteError` that names the folder and what to
    free or change.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options (got {storage_options!r})")
        target = Path(path)
        try:
            _write_atomically(checkpoint, target)
        except OSError as err:
            failure = err
        else:
            return
        raise write_error(target, checkpoint, failure)  # outside the except: the message is the whole story

    def load_checkpoint(self, path: Any, map_location: Any = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Lightning's reader, with an error naming the file, what is wrong and the fix for a damaged one."""
        kwargs = {} if map_location is None else {"map_location": map_location}
        try:
            return super().load_checkpoint(path, weights_only=weights_only, **kwargs)
        except Exception as err:
            damaged = damaged_checkpoint(path, err)
            if damaged is None:
                raise
            raise damaged from err


def _write_atomically(checkpoint: dict[str, Any], target: Path) -> None:
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


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (:func:`write_error`); ``errno`` is the failed write's. The file
    it was to replace, if any, is whole."""


#: Errors of a write to a full disk, and of one to a folder that cannot be written.
_FULL = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def write_error(target: Path, checkpoint: dict[str, Any], err: OSError) -> CheckpointWriteError:
    """The error for ``checkpoint`` that failed to be written to ``target`` with ``err``: names the file, the
    cause and, for a full disk, the checkpoint's size (its tensors) and the space left, with what to free; for
    a read-only folder, what to change."""
    cause = os.strerror(err.errno) if err.errno else str(err)
    folder, head = target.parent, f"could not write the checkpoint {target}: {cause}."
    kept = f"The previous {target.name}, if there is one, is whole."
    if err.errno in _FULL:
        size = _megabytes(tensor_bytes(checkpoint))
        fix = (f"A checkpoint of this run takes about {size}; the disk of {folder} has {_free(folder)} "
               f"free. Free at least {size} there (delete checkpoints no longer needed; ModelCheckpoint's "
               "save_top_k keeps fewer), or point the checkpoint folder (ModelCheckpoint's dirpath) at a "
               "disk with room.")
    elif err.errno in _READ_ONLY:
        fix = (f"The folder {folder} cannot be written: make it writable (a read-only file system: remount "
               "it read-write), or point the checkpoint folder (ModelCheckpoint's dirpath) at a writable "
               "one.")
    else:
        fix = f"Check the disk of {folder}."
    error = CheckpointWriteError(f"{head} {fix} {kept}")
    error.errno = err.errno
    return error


def tensor_bytes(obj: Any) -> int:
    """The bytes of the tensors in ``obj`` and the dicts, lists and tuples it holds: about what ``torch.save``
    writes of it."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def _free(folder: Path) -> str:
    """The free space of the disk that holds ``folder`` (or its nearest existing parent), in words."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
    try:
        return _megabytes(shutil.disk_usage(existing).free)
    except OSError:
        return "an unknown amount"


def _megabytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def damaged_checkpoint(path: Any, err: BaseException) -> RuntimeError | None:
    """The error for a local checkpoint file that failed to load with ``err`` because it is not a whole
    checkpoint (``torch.save`` writes a zip archive: a truncated or overwritten file is not one); names
    the file, its size and the other checkpoints beside it. None when ``err`` has another cause."""
    file = Path(str(path))
    if "://" in str(path) or not file.is_file() or zipfile.is_zipfile(file):
        return None
    names = sorted(p.name for p in file.parent.glob("*.ckpt") if p.name != file.name)
    others = f" (its folder also holds: {', '.join(names)})" if names else ""
    return RuntimeError(
        f"the checkpoint {file} ({file.stat().st_size} bytes) is damaged or truncated and cannot be read "
        f"({type(err).__name__}: {str(err)[:200]}); it was cut short by a copy or a full disk, or is not a "
        f"checkpoint. Resume from another checkpoint{others}, or start without ckpt_path."
    )


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


#: Exit status of a ``lit-grpo fit`` stopped by a signal after it wrote its checkpoint: "interrupted,
#: resumable". 75 is ``EX_TEMPFAIL`` of sysexits.h ("a temporary failure; the user is invited to retry"),
#: which job wrappers can requeue on. Not 128 + the signal's number (143 for SIGTERM), which shells and
#: schedulers read as "killed by the signal" (no checkpoint), and not 1, an error.
EXIT_INTERRUPTED = 75

#: The signals :class:`SaveOnInterrupt` handles by default: Ctrl-C, a scheduler's pre-emption notice
#: (SIGTERM; Slurm, Kubernetes, systemd), and the warnings sent ahead of a time limit: SIGUSR1 (Slurm's
#: ``--signal=USR1@<seconds>``) and SIGUSR2 (what submitit's jobs ask Slurm for, ``--signal=USR2@90``).
#: Left alone, either user signal ends a process at once, without a checkpoint.
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2")


class SaveOnInterrupt(Callback):
    """Ctrl-C (SIGINT), SIGTERM, SIGUSR1 or SIGUSR2 finishes the current training step, writes a checkpoint
    and stops ``fit``; ``lit-grpo fit`` then exits with :data:`EXIT_INTERRUPTED` (75): interrupted, resumable.

    The checkpoint is written between steps, so a run resumed from it (``ckpt_path=last``) goes on exactly.
    After a signal no further validation runs (neither Lightning's stopping one nor one due at that step); a
    signal during a validation pass lets that pass finish, then writes the checkpoint and stops; one during a
    checkpoint write lets the write finish and takes effect after the next step. A second Ctrl-C aborts at
    once (exit status 1), a late second SIGTERM too (143; ``repeat_window_s``); the checkpoints on disk stay
    whole (:class:`AtomicCheckpointIO`). A write that fails at the stop still exits 75 where an earlier
    checkpoint is there to resume from (:meth:`_resume_from_earlier`). Signals before training starts have
    their default effect. The ranks stop after the same step. The handlers are installed for ``fit`` only;
    they replace Lightning's SIGTERM handling (a stop without a checkpoint, exit 0) and its Slurm requeue on
    SIGUSR1 (requeue on 75 instead). Writes no metrics. ``lit-grpo fit`` adds one with the defaults; one
    listed in ``trainer.callbacks`` takes its place.

    Args:
        dirpath: Where ``last.ckpt`` is written; null: the folder of the trainer's ``ModelCheckpoint``,
            else ``<default_root_dir>/checkpoints``.
        filename: File name of the checkpoint.
        signals: Names of the signals that stop the run this way.
        repeat_window_s: Seconds after the first SIGTERM in which another is the same request (a wrapper
            that passes the signal on and a scheduler that signals the whole process group both send one):
            the run still writes its checkpoint and exits 75. A SIGTERM after it ends the process at once
            (status 143, no new checkpoint); 0: every second SIGTERM does.
    """

    def __init__(
        self, dirpath: str | None = None, filename: str = "last.ckpt", signals: list[str] | None = None,
        repeat_window_s: float = 5.0,
    ) -> None:
        names = list(STOP_SIGNALS if signals is None else signals)
        unknown = [n for n in names if not isinstance(getattr(signal, n, None), signal.Signals)]
        require(not unknown, f"SaveOnInterrupt: signals={names}: unknown {unknown}; use names like 'SIGTERM'")
        require(repeat_window_s >= 0, f"SaveOnInterrupt: repeat_window_s={repeat_window_s} must be >= 0")
        self.dirpath, self.filename, self.repeat_window_s = dirpath, filename, repeat_window_s
        self.signals = [getattr(signal, n) for n in names]
        self.requested = False
        self.received: str | None = None  # the name of the first signal received
        self.saved_path: Path | None = None
        self._first_sigterm: float | None = None  # when the first SIGTERM arrived (time.monotonic)
        self._stopping = False  # the ranks agreed to stop after a signal
        self._previous: dict[int, Any] = {}

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.requested, self.received, self.saved_path, self._first_sigterm = False, None, None, None
        self._stopping = False
        self._install()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._install()  # again: Lightning has put its own SIGTERM handler in front of ours since

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals can only be caught in the main thread
        for signum in self.signals:
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)  # the handler from before fit

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if not self.requested:
            self.requested, self.received = True, name
        again = ""
        if signum == signal.SIGINT:  # a second Ctrl-C interrupts at once
            signal.signal(signum, self._previous.get(signum) or signal.default_int_handler)
            again = " (Ctrl-C again to abort at once)"
        elif signum == signal.SIGTERM:
            if self._first_sigterm is not None:
                return self._sigterm_again(time.monotonic() - self._first_sigterm)
            self._first_sigterm = time.monotonic()
            again = (f" (a SIGTERM again within {self.repeat_window_s:g} s is the same request; one later "
                     "ends the process at once)")
        logger.warning("%s: finishing this step, then saving a checkpoint%s", name, again)

    def _sigterm_again(self, after: float) -> None:
        """A SIGTERM ``after`` seconds after the first: the same request within the window, else the end."""
        if after < self.repeat_window_s:
            logger.warning("SIGTERM again, %.1f s after the first (within repeat_window_s=%g): the same "
                           "request; still finishing this step and saving a checkpoint", after,
                           self.repeat_window_s)
            return
        logger.warning("SIGTERM again, %.1f s after the first: ending at once, without a new checkpoint "
                       "(exit status 143)", after)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._save_and_stop(trainer, f"after step {trainer.global_step}"):
            # Lightning validates once more when a run is told to stop (for early stopping); a pre-empted run
            # exits instead. The validation due at this step, if any, is skipped with it.
            epoch_loop = trainer.fit_loop.epoch_loop
            if hasattr(epoch_loop, "_skip_next_val"):
                epoch_loop._skip_next_val = True

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.training or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._save_and_stop(trainer, f"after the validation of step {trainer.global_step}")

    def _save_and_stop(self, trainer: Trainer, when: str) -> bool:
        """When any rank received a signal and no interrupt checkpoint exists yet: write it, stop the run. A
        write that fails (:class:`CheckpointWriteError`) stops it too where an earlier checkpoint is there to
        resume from (:meth:`_resume_from_earlier`), and raises where none is."""
        asked = trainer.strategy.reduce_boolean_decision(self.requested, all=False)
        if self.saved_path is not None or not asked:
            return False
        self._stopping, path = True, self._path(trainer)
        try:
            trainer.save_checkpoint(path)
        except CheckpointWriteError as err:
            if not self._resume_from_earlier(trainer, err, when):
                raise
        else:
            self.saved_path = path
            logger.warning(
                "%s: stopped %s; checkpoint written to %s. Resume with --ckpt_path %s (exit status %d)",
                self._signal(), when, path, path, EXIT_INTERRUPTED,
            )
        trainer.should_stop = True
        return True

    def _resume_from_earlier(self, trainer: Trainer, err: CheckpointWriteError, when: str) -> bool:
        """A checkpoint write failed with ``err`` while the run stops on a signal: logs it with the checkpoint
        to resume from, the stop's own if it was written, else the newest earlier one
        (:func:`earlier_checkpoint`), which the exit status (75) then stands for. False when there is none."""
        if self.saved_path is not None:
            logger.error("%s\n%s: resume with --ckpt_path %s (exit status %d)", err, self._signal(),
                         self.saved_path, EXIT_INTERRUPTED)
            return True
        self.saved_path = earlier_checkpoint(trainer)
        if self.saved_path is None:
            return False
        logger.error("%s\n%s: stopped %s without its checkpoint; resume from the earlier checkpoint %s with "
                     "--ckpt_path %s (exit status %d): the steps after it are trained again", err,
                     self._signal(), when, self.saved_path, self.saved_path, EXIT_INTERRUPTED)
        return True

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """A checkpoint write that failed after the stop (the scheduled one of the same step) leaves the run
        resumable (:func:`stopped_resumably`) where a checkpoint is there to resume from. Restores the signal
        handlers (Lightning calls no ``teardown`` hook after an exception)."""
        if isinstance(exception, CheckpointWriteError) and self._stopping:
            self._resume_from_earlier(trainer, exception, f"after step {trainer.global_step}")
        self.teardown(trainer, pl_module, "fit")

    def _signal(self) -> str:
        return self.received or "a signal on another rank"

    def _path(self, trainer: Trainer) -> Path:
        if self.dirpath is not None:
            return Path(self.dirpath) / self.filename
        checkpoint = trainer.checkpoint_callback
        folder = getattr(checkpoint, "dirpath", None) or Path(trainer.default_root_dir) / "checkpoints"
        return Path(folder) / self.filename

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        for signum, previous in self._previous.items():  # the handlers from before fit
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}


def check_outputs(trainer: Trainer) -> None:
    """Before a run starts, every folder it will write in can be made and written: the trainer's
    ``default_root_dir``, each logger's ``save_dir`` and each callback's ``dirpath`` (checkpoints, exports). A
    regular file in the way or a folder without write permission is named with its option now, not as an OS
    error after the first training step. Nothing is created."""
    require_folder("trainer.default_root_dir", trainer.default_root_dir)
    for log in trainer.loggers:
        if getattr(log, "save_dir", None):
            require_folder(f"trainer.logger ({type(log).__name__}) save_dir", log.save_dir)
    for callback in trainer.callbacks:
        if getattr(callback, "dirpath", None):
            require_folder(f"trainer.callbacks ({type(callback).__name__}) dirpath", callback.dirpath)


def new_log_dirs(trainer: Trainer) -> list[Path]:
    """The folders of the trainer's TensorBoard and CSV loggers that do not exist yet: the run will create
    them (``runs/<name>/version_N``). Read before the run starts, so that a failed start can remove what it
    left (:func:`remove_unused_log_dirs`)."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    dirs = {log.log_dir for log in trainer.loggers if isinstance(log, TensorBoardLogger | CSVLogger)}
    return sorted(Path(d) for d in dirs if d and not Path(d).exists())


#: what a run leaves in its logger folder before anything is logged
_UNUSED_FILES = {"config.yaml", "hparams.yaml"}


def remove_unused_log_dirs(dirs: list[Path]) -> list[Path]:
    """Remove each of ``dirs`` that holds nothing a run logged: only ``config.yaml``, ``hparams.yaml`` and
    TensorBoard event files with no record past the file's header (a failed start leaves these; the next run
    would otherwise take a higher version number). A folder with any metric, checkpoint or other file stays.
    Returns the folders removed."""
    removed = []
    for folder in dirs:
        if not folder.is_dir():
            continue
        files = list(folder.rglob("*"))
        if all(f.is_file() and (f.name in _UNUSED_FILES or (f.name.startswith("events.out.tfevents.")
                                                          and _header_only(f))) for f in files):
            for f in files:
                f.unlink()
            folder.rmdir()
            removed.append(folder)
    return removed


def _header_only(path: Path) -> bool:
    """Whether a TensorBoard event file holds no record past its first, the file-version header every writer
    starts with (TFRecord framing: an 8-byte length, a 4-byte CRC, the data and its 4-byte CRC). Reads 8
    bytes."""
    with path.open("rb") as f:
        head = f.read(8)
    return len(head) < 8 or path.stat().st_size <= 8 + 4 + int.from_bytes(head, "little") + 4


def earlier_checkpoint(trainer: Trainer) -> Path | None:
    """The newest local checkpoint ``trainer``'s run can resume from: the last or best one its
    ``ModelCheckpoint`` callbacks wrote, or the one it resumed from; None when there is none."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    paths = [p for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)
             for p in (c.last_model_path, c.best_model_path)]
    files = [Path(p) for p in [*paths, trainer.ckpt_path] if p and "://" not in str(p) and Path(p).is_file()]
    return max(files, key=lambda f: f.stat().st_mtime) if files else None


def stopped_resumably(trainer: Trainer, err: BaseException) -> bool:
    """Whether ``err``, which ended ``trainer``'s ``fit``, is a checkpoint write that failed while the run
    stopped on a signal with a checkpoint to resume from: ``lit-grpo fit`` then exits 75, not 1."""
    return isinstance(err, CheckpointWriteError) and exit_status(trainer) == EXIT_INTERRUPTED


def exit_status(trainer: Trainer) -> int:
    """:data:`EXIT_INTERRUPTED` when a :class:`SaveOnInterrupt` stopped ``trainer``'s run with a checkpoint,
    else 0."""
    stopped = any(isinstance(c, SaveOnInterrupt) and c.saved_path is not None for c in trainer.callbacks)
    return EXIT_INTERRUPTED if stopped else 0


# ---- helpers for the GRPO module's own checkpoint state (GRPOModule.on_save_checkpoint) ----------------
def rng_states() -> dict[str, Any]:
    """This process's global random states (torch CPU and CUDA, numpy, ``random``)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # plain types: weights_only loads them
        "numpy": (name, keys.tolist(), int(pos), int(has_gauss), float(gauss)),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`rng_states` returned."""
    torch.set_rng_state(states["torch"])
    name, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def model_identity(model: str) -> str:
    """A local model directory as its absolute, resolved path (symbolic links followed), a model shipped with
    lit-grpo (``tiny-arith-sft``) as the path of its folder, so that either spelling of it is the same model;
    a hub id as it is."""
    path = bundled_model(model) or Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


#: What to do about a fingerprint entry that differs, beside the general advice of :func:`check_fingerprint`.
FINGERPRINT_ADVICE = {
    "train_data": "the training prompts are not those the checkpoint was trained on, so its data position "
                  "points at other prompts: point data.source at the data the checkpoint was trained on, or "
                  "start a fresh run (without --ckpt_path)",
}


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], also: Sequence[str] = ()) -> None:
    """Raise a ``ValueError`` naming every setting that differs between a checkpoint and this run (settings
    only one of them has are not compared: older checkpoints lack newer ones), and the differences ``also``
    found elsewhere (the data position's settings), so that one refusal lists them all. A checkpoint without
    the fingerprint of the training data (written before it was taken) is resumed with a warning that the
    data could not be checked."""
    if isinstance(saved.get("model"), str):  # written as given by checkpoints of earlier versions
        saved = {**saved, "model": model_identity(saved["model"])}
    differ = [*map(_advised, differences(saved, current)), *also]
    require(not differ,
            "the checkpoint was written with a different configuration, so its state does not fit this run: "
            + "; ".join(differ)
            + ". Resume with the checkpoint's settings, or start a new run from exported weights "
            "(lit_grpo.callbacks.SavePretrained) to change them.")
    if "train_data" in current and "train_data" not in saved:
        logger.warning(
            "the checkpoint holds no fingerprint of its training data (an earlier version, or a run without "
            "PromptDataModule, wrote it), so the content of the training data could not be checked: resuming "
            "on the assumption that data.source gives the prompts it was trained on (this run: %s)",
            current["train_data"])


def _advised(line: str) -> str:
    """A line of :func:`~lit_grpo.checks.differences` with its :data:`FINGERPRINT_ADVICE`, if any."""
    advice = FINGERPRINT_ADVICE.get(line.partition(":")[0])
    return f"{line} ({advice})" if advice else line


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` with one process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [obj]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def run_state(fingerprint: dict[str, Any], counters: dict[str, Any]) -> dict[str, Any]:
    """What a training module saves beside Lightning's state: its ``fingerprint`` (:func:`check_fingerprint`),
    its ``counters`` and every rank's random states (gathered on every rank)."""
    return {"fingerprint": fingerprint, **counters, "rng": gather_objects(rng_states())}


def restore_run_state(state: dict[str, Any], fingerprint: dict[str, Any], data: Any, saved_data: Any,
                      rank: int) -> dict[str, Any]:
    """Raise when ``state`` (:func:`run_state`) was written with another ``fingerprint`` or the DataModule
    ``data`` holds its saved position ``saved_data`` with other settings, naming them all (Lightning restores
    the module before the DataModule); else restore rank ``rank``'s random states and return the counters."""
    differ = []
    if saved_data and hasattr(data, "position_differences"):
        differ = data.position_differences(saved_data)
    if "fingerprint" in state:
        check_fingerprint(state["fingerprint"], fingerprint, also=differ)
    if rng := state.get("rng"):
        set_rng_states(of_rank(rng, rank))
    return {k: v for k, v in state.items() if k not in ("fingerprint", "rng")}


def of_rank(items: list[Any], rank: int) -> Any:
    """Rank ``rank``'s entry of a list gathered over ranks (the first, for a rank the saving run lacked)."""
    return items[rank] if rank < len(items) else items[0]
