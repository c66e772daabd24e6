"""Shared pieces of the fault matrix: a tiny 2-step ``lit-grpo fit`` config, in-process and subprocess
runs that report the exit status ``lit-grpo`` would give, faulty rewards, and callbacks/IO that pause a
run where a test sends it a signal."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import lightning as L
import torch
import yaml

from lit_grpo.checkpoint import AtomicCheckpointIO, exit_status
from lit_grpo.cli import LitGRPOCLI
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.types import RewardOutput

ROOT = Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "assets" / "tiny-arith-sft")


def config(tmp: Path, steps: int = 2, **overrides: Any) -> dict:
    """A 2-prompt, 2-completion GRPO run of the committed tiny policy, checkpointing every step into
    ``tmp/ckpt``; ``overrides`` are dotted keys (``"model.init_args.optim.lr": 0.1``) or top-level sections."""
    cfg: dict[str, Any] = {
        "seed_everything": 0,
        "trainer": {
            "max_steps": steps, "accelerator": "cpu", "logger": False, "enable_progress_bar": False,
            "enable_model_summary": False, "limit_val_batches": 0, "default_root_dir": str(tmp),
            "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {
                "dirpath": str(tmp / "ckpt"), "save_last": True, "save_top_k": 0, "every_n_train_steps": 1}}],
        },
        "model": {"class_path": "lit_grpo.GRPOModule", "init_args": {
            "model": MODEL, "reward": {"class_path": "lit_grpo.ExactMatch"}, "group_size": 2,
            "sampling": {"max_new_tokens": 4}, "optim": {"lr": 1e-3}}},
        "data": {"source": {"class_path": "lit_grpo.SyntheticArithmetic", "init_args": {
            "num_train": 16, "num_val": 2, "num_test": 2, "max_operand": 20, "seed": 0}},
            "prompts_per_step": 2},
    }  # fmt: skip
    for key, value in overrides.items():
        node, *path, last = key.split(".")
        target = cfg[node]
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    return cfg


def write_config(tmp: Path, cfg: dict, name: str = "config.yaml") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@dataclass
class Outcome:
    """What ``lit-grpo fit`` would end with: the exit status, the message (the error's text, or what
    was printed to stderr) and, when it got that far, the CLI object."""

    status: int
    message: str
    cli: Any = None


def fit(cfg: dict | Path, tmp: Path, *args: str) -> Outcome:
    """``lit-grpo fit --config cfg args...`` in this process: the status ``main()`` would exit with
    (75 after a signal stopped the run, 1 for an exception, the code of a ``SystemExit``)."""
    path = cfg if isinstance(cfg, Path) else write_config(tmp, cfg)
    cli = None
    try:
        cli = LitGRPOCLI(args=["fit", "--config", str(path), *args])
    except SystemExit as exc:  # argument errors: jsonargparse prints to stderr and exits 2
        return Outcome(exc.code if isinstance(exc.code, int) else 1, str(exc))
    except Exception as exc:
        return Outcome(1, "".join(traceback.format_exception(exc)))
    return Outcome(exit_status(cli.trainer), "", cli)


def run_subprocess(cfg: dict, tmp: Path, *args: str, signals: list[tuple[str, int]] = (), timeout: float = 240):
    """``python -m lit_grpo fit --config ...`` in a child process. ``signals``: ``(marker, signum)``
    pairs: when the file ``tmp/<marker>`` appears (written by :class:`PauseAt` / :class:`PausingIO`), the
    test sends ``signum`` to the child. Returns the finished process (``returncode``, ``stderr``)."""
    path = write_config(tmp, cfg)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(torch.get_num_threads()),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(tmp / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "lit_grpo", "fit", "--config", str(path), *args],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout
        try:
            for marker, signum in signals:
                while not (tmp / marker).exists():
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise AssertionError(f"no {marker} before the child ended: {(tmp / 'stderr.txt').read_text()[-3000:]}")
                    time.sleep(0.05)
                proc.send_signal(signum)
                (tmp / f"{marker}.sent").touch()
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    proc.stderr_text = (tmp / "stderr.txt").read_text()
    return proc


def params(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


def same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def checkpoint_step(path: Path) -> int:
    return torch.load(path, weights_only=True, map_location="cpu")["global_step"]


class Saved:
    """The files under a folder, by content hash: ``unchanged()`` says none was lost or altered."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.hashes = {p: _sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}
        assert self.hashes, f"nothing saved under {folder}"

    def unchanged(self) -> bool:
        return all(p.is_file() and _sha(p) == h for p, h in self.hashes.items())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_jsonl(path: Path, lines: list[Any]) -> str:
    """Rows (dicts, dumped as JSON) or raw lines (bytes / str, written as they are)."""
    with open(path, "wb") as f:
        for line in lines:
            raw = line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
            f.write(raw + b"\n")
    return str(path)


def arithmetic_rows(n: int, answer=str) -> list[dict]:
    return [{"prompt": f"{a}+{a + 1}=", "answer": answer(2 * a + 1)} for a in range(n)]


# ---- faulty rewards (referenced by class path from the configs) ---------------------------------------
class Raising(RewardFunction):
    """Raises in ``__call__`` on ``calls`` (1-based) or on every call."""

    def __init__(self, calls: list[int] | None = None) -> None:
        self.calls, self.n = calls, 0

    def __call__(self, completions, references, **columns):
        self.n += 1
        if self.calls is None or self.n in self.calls:
            raise ConnectionError(f"the scoring service is down (call {self.n})")
        return RewardOutput(torch.ones(len(completions)))


class Constant(RewardFunction):
    """Every completion scores ``value`` (``"nan"``, ``"inf"``...), one score too few when ``short``."""

    def __init__(self, value: str = "1", short: bool = False) -> None:
        self.value, self.short = float(value), short

    def __call__(self, completions, references, **columns):
        return RewardOutput(torch.full((len(completions) - self.short,), self.value))


class Hanging(RewardFunction):
    """Sleeps ``seconds`` on ``calls`` (1-based), else scores 1."""

    def __init__(self, seconds: float = 600.0, calls: list[int] | None = None) -> None:
        self.seconds, self.calls, self.n = seconds, calls, 0

    def __call__(self, completions, references, **columns):
        self.n += 1
        if self.calls is None or self.n in self.calls:
            time.sleep(self.seconds)
        return RewardOutput(torch.ones(len(completions)))


class Exploding(RewardFunction):
    """Rewards that are finite but huge, so that the loss overflows: every step is non-finite."""

    def __call__(self, completions, references, **columns):
        return RewardOutput(torch.tensor([(-1.0) ** i * 3e38 for i in range(len(completions))]))


class Collapse(L.Callback):
    """Before the first step, zeroes the policy's output layer: every logit is 0, so the policy samples uniformly
    with finite weights, as a run that has diverged into noise does."""

    def on_train_start(self, trainer, pl_module) -> None:
        with torch.no_grad():
            pl_module.policy.get_output_embeddings().weight.zero_()


class Poison(L.Callback):
    """Before the first step, sets the policy's output layer to NaN: sampling meets non-finite logits, as a run whose
    weights overflowed does."""

    def on_train_start(self, trainer, pl_module) -> None:
        with torch.no_grad():
            pl_module.policy.get_output_embeddings().weight.fill_(float("nan"))


# ---- pausing a run where a test sends a signal ------------------------------------------------------
class PauseAt(L.Callback):
    """Mid-step ``step`` (before its optimizer step), writes ``<default_root_dir>/<marker>`` and waits up
    to 120 s for a signal to arrive (the handler ends the wait by setting ``SaveOnInterrupt.requested``).
    With ``again``, then writes ``<default_root_dir>/<again>`` and waits (up to 120 s) until the test has
    sent its next signal (``<again>.sent``), if the process still lives: the handler has run on it then."""

    def __init__(self, step: int, marker: str = "paused", again: str | None = None) -> None:
        self.step, self.marker, self.again = step, marker, again

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step != self.step:
            return
        Path(trainer.default_root_dir, self.marker).touch()
        _wait_for_request(trainer)
        if self.again is not None:
            Path(trainer.default_root_dir, self.again).touch()
            _wait_for_file(Path(trainer.default_root_dir, f"{self.again}.sent"))


class PauseInValidation(L.Callback):
    """In the validation after step ``step``, writes ``<default_root_dir>/<marker>`` and waits as :class:`PauseAt`
    does."""

    def __init__(self, step: int, marker: str = "paused") -> None:
        self.step, self.marker = step, marker

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.global_step == self.step and not trainer.sanity_checking:
            Path(trainer.default_root_dir, self.marker).touch()
            _wait_for_request(trainer)


class RecordValidations(L.Callback):
    """Every validation that finishes leaves ``<default_root_dir>/validated-<step>`` (``-2`` appended for a
    second one after the same step)."""

    def on_validation_end(self, trainer, pl_module) -> None:
        done = Path(trainer.default_root_dir, f"validated-{trainer.global_step}")
        (done.with_name(done.name + "-2") if done.exists() else done).touch()


class SendSignal(L.Callback):
    """Sends ``signal`` to this process mid-step ``step`` (for in-process runs)."""

    def __init__(self, step: int, signal: str = "SIGINT") -> None:
        self.step, self.signal = step, signal

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), getattr(signal, self.signal))


class PausingIO(AtomicCheckpointIO):
    """Atomic writes that pause in the middle of saves number ``pauses`` (1-based): a partial temporary
    file is on disk, the marker ``<folder>/../saving-<n>`` is written, and the save waits (up to 120 s)
    until the test has sent its signal (``saving-<n>.sent``) before it goes on, if it still lives."""

    def __init__(self, pauses: list[int]) -> None:
        super().__init__()
        self.pauses, self.saves = pauses, 0

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        self.saves += 1
        if self.saves in self.pauses:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            (target.parent / f".{target.name}.partial.tmp").write_bytes(b"PK\x03\x04 half a checkpoint")
            (target.parent.parent / f"saving-{self.saves}").touch()
            _wait_for_file(target.parent.parent / f"saving-{self.saves}.sent")
        super().save_checkpoint(checkpoint, path, storage_options)


class FullDiskIO(AtomicCheckpointIO):
    """Atomic writes on a disk that fills up (``error="ENOSPC"``) or turns read-only (``"EROFS"``) from save
    number ``full_from`` (1-based) on: those writes get a few bytes into their temporary file, then fail with
    that ``OSError``, as ``torch.save`` does on such a disk. Works as root, where a read-only folder (chmod)
    does not stop a write."""

    def __init__(self, full_from: int, error: str = "ENOSPC") -> None:
        super().__init__()
        self.full_from, self.errno, self.saves = full_from, getattr(errno, error), 0

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        self.saves += 1
        if self.saves < self.full_from:
            return super().save_checkpoint(checkpoint, path, storage_options)

        def full(obj, f) -> None:
            f.write(b"PK\x03\x04 the start of a checkpoint")
            raise OSError(self.errno, os.strerror(self.errno))

        with mock.patch("torch.save", full):
            super().save_checkpoint(checkpoint, path, storage_options)


def _wait_for_request(trainer) -> None:
    from lit_grpo.checkpoint import SaveOnInterrupt

    stop = next(c for c in trainer.callbacks if isinstance(c, SaveOnInterrupt))
    deadline = time.monotonic() + 120
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
