"""Asynchronous rollouts: the next batch is generated while the trainer updates on an earlier one."""

from __future__ import annotations

import copy
import ctypes
import logging
import signal
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch
from torch import nn

from lit_grpo.checks import require
from lit_grpo.parallel import is_fsdp1, seed_step, step_seed
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.decode import own_stream
from lit_grpo.rollout.hf import HFGenerateEngine
from lit_grpo.rollout.producer import (
    AUTOMATIC_FACTOR,
    AUTOMATIC_FLOOR_S,
    ProducerError,
    ProducerThread,
    exit_description,
    process_state,
    random_states,
    set_random_states,
    stall_limit,
    stop_handler,
)
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams

logger = logging.getLogger(__name__)

#: The signals a scheduler sends to a whole process group (Slurm, Kubernetes, a terminal's Ctrl-C): a
#: producer process ignores them, so that the trainer decides what an interrupt stops (``SaveOnInterrupt``)
#: and stops the producer, and blocks them while it starts.
GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)

#: Seconds between two looks, while the trainer waits for the producer, at a stop request and at the limit.
POLL_S = 0.5


@dataclass
class Produced:
    """A rollout batch the producer finished: its prompts, rollouts, the policy version that generated them
    and its seed's index."""

    batch: PromptBatch
    rollouts: Rollouts
    version: int
    index: int
    # time.monotonic() when the producer began and finished it (one clock for all processes)
    started: float = 0.0
    ended: float = 0.0
    rng: dict[str, Any] | None = None  # a producer process's random states after it (max_staleness 0)


@dataclass(eq=False)
class InFlight:
    """A batch handed to the producer: its prompts, its seed's index, the policy version it is generated with,
    the number of the weight load before it (whose buffer holds those weights; -1: a batch a checkpoint held
    finished) and the future of its :class:`Produced`."""

    batch: PromptBatch
    index: int
    version: int
    load: int
    future: Future


class AsyncRollouts(RolloutEngine):
    """Generation decoupled from training: a producer (a thread, or a process of its own) with its own copy of
    the policy generates the rollouts of each step's prompts while the trainer updates on the rollouts of the
    prompts drawn ``max_staleness`` steps before (one-step-off-policy GRPO at ``max_staleness: 1``).

    Use it as the module's engine around the engine that generates: ``model.engine: {class_path:
    lit_grpo.AsyncRollouts, init_args: {engine: ..., max_staleness: 1}}``. The Hugging Face engine (thread or
    process) and :class:`~lit_grpo.envs.EpisodeEngine` (thread) are supported; vLLM and sharded (FSDP)
    policies are refused. The first ``max_staleness`` steps only fill the pipeline. At ``max_staleness >= 1``
    the loss is given ``TruncatedIS()`` unless it has a correction of its own (``correction: none``: none).
    How the weights, the random streams and checkpoints behave: docs/scale.md, "Asynchronous rollouts".

    Logged per step: ``async/staleness_mean`` and ``async/staleness_max`` (policy versions between generating
    and training the step's batch), ``async/queue_wait_s`` (the trainer waiting for its batch),
    ``async/sync_wait_s`` (the trainer waiting for, and copying into, a weight buffer) and
    ``async/producer_wait_s`` (the producer idle between batches).

    Args:
        engine: The engine that generates, bound to the producer's copy of the policy.
        max_staleness: Steps between drawing a batch's prompts and training on its rollouts (0: synchronous).
        producer_threads: Intra-op threads of the producer (``torch.set_num_threads`` there); null: as the
            process. On a CPU, split the cores between the producer and the trainer.
        producer: ``thread`` (a thread of the training process) or ``process`` (a process of its own, started
            with ``spawn`` on the first batch and stopped with the fit, so that the producer's Python work
            does not share the trainer's interpreter lock; the Hugging Face engine only).
        correction: At ``max_staleness >= 1``: ``truncated_is`` (the default) or ``none`` (no correction of
            the staleness).
        producer_timeout_s: How long the producer may go without finishing a job while it has one (seconds;
            null: 10 times its slowest job so far in the fit, at least 300 s, as is a process's first job).
            A producer stalled past it (a process is killed; a thread cannot be, and is left behind) or dead
            stops the run: the step waiting for it is given back, the interrupt checkpoint
            (``SaveOnInterrupt``, which ``lit-grpo fit`` adds) holds the batches in flight as their prompts
            and the weights they are generated with, so that a resumed run trains exactly what the
            uninterrupted one would, and the fit ends with a ``ProducerError`` naming the producer and the
            fix (exit status 1). A stop signal while the trainer waits gives the step back the same way and
            exits 75; an interrupt checkpoint never waits for the producer.
    """

    def __init__(self, engine: RolloutEngine | None = None, max_staleness: int = 1,
                 producer_threads: int | None = None, producer: Literal["thread", "process"] = "thread",
                 correction: Literal["truncated_is", "none"] = "truncated_is",
                 producer_timeout_s: float | None = None) -> None:
        require(max_staleness >= 0,
                f"AsyncRollouts: max_staleness={max_staleness} must be >= 0 (0: synchronous)")
        require(producer_threads is None or producer_threads >= 1,
                f"AsyncRollouts: producer_threads={producer_threads} must be >= 1, or null for the process's")
        require(producer in ("thread", "process"),
                f"AsyncRollouts: producer={producer!r}; use 'thread' or 'process'")
        require(correction in ("truncated_is", "none"),
                f"AsyncRollouts: correction={correction!r}; use one of truncated_is, none")
        require(producer_timeout_s is None or producer_timeout_s > 0,
                f"AsyncRollouts: producer_timeout_s={producer_timeout_s} must be > 0 (seconds), or null for "
                f"the automatic limit ({AUTOMATIC_FACTOR:g} x the producer's slowest job, at least "
                f"{AUTOMATIC_FLOOR_S:g} s)")
        self.engine = engine if engine is not None else HFGenerateEngine()
        require(not self.engine.owns_weights,
                f"AsyncRollouts does not run {type(self.engine).__name__}: it keeps its own copy of the "
                "weights (vLLM's workers), and a producer around it is not tested. Use it as the module's "
                "engine (synchronous), or HFGenerateEngine inside AsyncRollouts")
        require(producer == "thread" or isinstance(self.engine, HFGenerateEngine),
                f"AsyncRollouts(producer='process') runs the Hugging Face engine in its own process; "
                f"{type(self.engine).__name__} runs in a thread (producer: thread)")
        if max_staleness and producer == "thread" and getattr(self.engine, "decoder", None) == "generate":
            logger.warning("AsyncRollouts: HFGenerateEngine(decoder='generate') samples with Hugging Face "
                           "generate, which draws from the process's random generator; a producer thread "
                           "shares it with the trainer, so the samples depend on thread timing when the "
                           "trainer draws random numbers (dropout). Use decoder: own, or producer: process, "
                           "for reproducible runs")
        self.max_staleness, self.producer_threads, self.producer = max_staleness, producer_threads, producer
        self.correction, self.producer_timeout_s = correction, producer_timeout_s
        self.copy: nn.Module | None = None
        self.pending: deque[InFlight] = deque()  # the batches handed to the producer, oldest first
        self.version = 0  # weight copies into the producer's policy so far
        self.submitted = 0  # batches handed to the producer so far (their seeds' index)
        self.seed: int | None = None
        self._source: nn.Module | None = None  # the trainer's policy, whose weights the producer loads
        self._current = False  # whether the producer has the trainer's weights of this fit
        self._buffers: list[dict[str, torch.Tensor]] = []  # weight buffers, used in turn
        self._loads: list[Future | None] = [None] * (max_staleness + 1)  # each buffer's latest load
        self._serials = [-1] * (max_staleness + 1)  # the number of the load each buffer holds
        self._queued = 0  # weight loads queued so far
        self._executor: Executor | None = None
        self._process: Any = None  # a producer process (multiprocessing.Process), once started
        self._left: ProducerThread | None = None  # a producer thread a stop left running its job
        # drawn by the data but not handed over yet: the batch of a step given back (and after it, in a
        # resumed run, each step's, one step later)
        self.held: deque[PromptBatch] = deque()
        self._handed: InFlight | None = None  # the batch handed over in this step
        # a resumed run's batches in flight, as the checkpoint held them, and the weights of those unfinished
        self._restored: list[dict[str, Any]] = []
        self._restored_weights: dict[int, dict[str, torch.Tensor]] = {}
        self._jobs: list[Future] = []  # the producer's jobs not seen finished
        self._progress = 0.0  # time.monotonic() of the latest job handed over or finished
        self._slowest = 0.0  # the producer's slowest job in this fit (s)
        self._up = False  # whether the producer (a process: started) has finished a job
        self._lost: str | None = None  # why the producer is gone (dead or stalled), once it is
        self._stop: Any = None  # the callback that stops the fit on a signal (producer.stop_handler)
        self._idle_since: float | None = None  # when the producer finished its latest job (time.monotonic())
        self._step: dict[str, Any] = self._new_step()

    # ---- the engine interface ---------------------------------------------------------------------------
    def bind(self, policy: nn.Module, tokenizer) -> None:
        sharded = any(hasattr(p, "full_tensor") for p in policy.parameters()) or is_fsdp1(policy)  # FSDP2, 1
        require(not sharded, "AsyncRollouts needs the whole policy in each process for its producer's copy; "
                "a sharded (FSDP) policy cannot be copied. Use the DDP strategy, or the synchronous engine")
        self.copy = copy.deepcopy(policy).requires_grad_(False)
        self.engine.bind(self.copy, tokenizer)
        self._source, self._current = policy, False

    def staleness(self) -> tuple[int, str]:
        """``(max_staleness, correction)``: the module gives the loss the correction its stale rollouts
        need."""
        return self.max_staleness, self.correction

    def rollout_ahead(self, batch: PromptBatch, n: int,
                      sampling: SamplingParams) -> tuple[PromptBatch, Rollouts] | None:
        """Hand ``batch`` to the producer; the oldest finished batch's prompts and rollouts, or None while the
        pipeline fills (the first ``max_staleness`` steps) and when the step is given back: the producer is
        gone, or a stop was asked for while the trainer waited (the batch is handed over in the next fit)."""
        self._check_bound()
        self._make_current()
        if self.seed is None:
            self.seed = torch.initial_seed()
        self.held.append(batch)
        self._handed = None
        # the producer has the trainer's weights, and the checkpoint's batches went first
        if self._lost is None and self._current and self._restore(n, sampling):
            self._handed = self._produce(self.held.popleft(), n, sampling, self.submitted)
            self.submitted += 1
            self.pending.append(self._handed)
        filling = len(self.pending) <= self.max_staleness
        started = time.perf_counter()
        # filling, wait for every batch, so that no step starts (and seeds the random generator a sampler
        # without a stream of its own shares) while it generates
        waiting = list(self.pending) if filling else [self.pending[0]]
        ready = self._handed is not None and all(self._await(item.future, f"for batch {item.index}")
                                                 for item in waiting)
        if not self._agree(ready):
            self._give_back()
            return None
        if filling:
            return None
        # the producer's exception (and traceback) ends the step
        produced = self.pending.popleft().future.result()
        self._step["queue_wait_s"] += time.perf_counter() - started
        if produced.rng is not None:  # a process drew from a copy of the trainer's random state: continue it
            set_random_states(produced.rng)
        self._step["staleness"].append(self.version - produced.version)
        self._account(produced.started, produced.ended)
        return produced.batch, produced.rollouts

    def rollout(self, batch: PromptBatch, n: int, sampling: SamplingParams) -> Rollouts:
        """Synchronously, with the current weights (refills, validation)."""
        return self._now("rollout", batch, n, sampling)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> Rollouts:
        return self._now("generate", prompts, n, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        return self._now("generate_ids", prompt_ids, n, sampling)

    def max_sequence_length(self) -> int | None:
        return self.engine.max_sequence_length()

    def max_sampled_tokens(self, max_new_tokens: int) -> int:
        return self.engine.max_sampled_tokens(max_new_tokens)

    def sync_weights(self, policy: nn.Module) -> float:
        """Copy ``policy``'s weights into the next buffer and queue their load behind the batches handed over
        so far (one version more); the batches in flight go on. Waits only for the buffer's previous load."""
        self._check_bound()
        started = time.perf_counter()
        if self._lost is None and not self._queue_load(_weights(policy)):
            self._current = False  # not loaded (a stop was asked for): the trainer's weights first next time
        self.version += 1
        elapsed = time.perf_counter() - started
        self._step["sync_wait_s"] += elapsed
        return elapsed

    def metrics(self) -> dict[str, float]:
        """The step's ``async/*`` numbers (see the class); the counters start again for the next step."""
        step, self._step = self._step, self._new_step()
        staleness = step["staleness"] or [0]
        return {"async/staleness_mean": sum(staleness) / len(staleness),
                "async/staleness_max": float(max(staleness)), "async/queue_wait_s": step["queue_wait_s"],
                "async/sync_wait_s": step["sync_wait_s"], "async/producer_wait_s": step["producer_wait_s"]}

    def close(self) -> None:
        """At the end of a fit: drop the batches no step will train (a checkpoint written at the last step
        holds them) and stop the producer: it finishes the job in progress, unless it is gone or, a process, a
        stop was asked for (it is killed then). Raises a :class:`~lit_grpo.rollout.producer.ProducerError`
        when the producer is gone or raised on a batch no step trains."""
        try:
            if self._executor is not None:
                self._shut_down()
            error = self._lost_error() if self._lost is not None else self._untrained_error()
        finally:
            self.pending.clear()
            self.held.clear()
            self._loads = [None] * (self.max_staleness + 1)
            self._jobs, self._lost, self._stop, self._slowest = [], None, None, 0.0
            self._current = False  # a later fit starts from the trainer's weights then
        if error is not None:
            raise error

    # ---- checkpoints ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The batches in flight (plain lists and tensors, which ``torch.load(weights_only=True)`` reads),
        with the counters that seed and version the next ones, and the batches drawn but not handed over yet.
        Finished batches keep their rollouts; multi-turn episodes keep only their prompts (an episode's
        environment state need not be storable), so a resumed run generates those again. A batch not finished
        (after a stop request, which the checkpoint does not wait for, or with the producer gone) keeps its
        prompts and, when they are not the trainer's current ones, the weights it is generated with (only the
        tensors that differ: a LoRA run's adapters), so that a resumed run generates it again exactly."""
        entries: list[dict[str, Any]] = []
        weights: dict[int, dict[str, torch.Tensor]] = {}
        waits = self._lost is None and not self._stop_requested()
        for item in self.pending:
            waits = waits and self._await(item.future, "for the batches a checkpoint holds")
            future = item.future
            failed = future.done() and not future.cancelled() and future.exception() is not None
            if future.done() and not future.cancelled() and (not failed or waits):
                entries.append(_plain(future.result()))  # the producer's own error fails the checkpoint
                continue
            entries.append({"batch": _fields(item.batch), "version": item.version, "index": item.index})
            if item.version != self.version and item.version not in weights:
                weights[item.version] = self._weights_of(item)
        for saved in self._restored:
            if "rollouts" not in saved and saved["version"] in self._restored_weights:
                weights[saved["version"]] = self._restored_weights[saved["version"]]
        return {"max_staleness": self.max_staleness, "version": self.version, "submitted": self.submitted,
                "seed": self.seed, "pending": [*entries, *self._restored],
                "held": [_fields(batch) for batch in self.held],
                "weights": {v: w for v, w in weights.items() if w is not None}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        require(state["max_staleness"] == self.max_staleness,
                f"AsyncRollouts: the checkpoint was written with max_staleness={state['max_staleness']}, "
                f"this run has {self.max_staleness}; its {len(state['pending'])} batches in flight were "
                f"drawn for that pipeline. Resume with max_staleness={state['max_staleness']}")
        self.version, self.submitted, self.seed = state["version"], state["submitted"], state["seed"]
        self._restored = list(state["pending"])
        self._restored_weights = dict(state.get("weights", {}))
        self.held = deque(PromptBatch(**batch) for batch in state.get("held", []))
        self._current = False  # the trainer's weights are restored after this: loaded before the next batch

    # ---- the producer -------------------------------------------------------------------------------------
    def _make_current(self) -> None:
        """At a fit's first batch or validation: queue the trainer's weights (a resumed run's restored ones;
        no version more), and find the callback a stop request reaches."""
        if not self._current:
            self._stop = stop_handler()
            self._current = self._lost is None and self._queue_load(_weights(self._source))

    def _restore(self, n: int, sampling: SamplingParams) -> bool:
        """A resumed run's first batch: the batches its checkpoint held come first, the finished ones as they
        were, the others generated again with the weights they were generated with (the checkpoint's, or the
        trainer's restored ones), then the trainer's weights again. Whether all were handed over (not when a
        wait for a weight buffer ended without it)."""
        loaded = None  # the version whose own weights the producer holds; None: the trainer's
        while self._restored and self._lost is None:
            saved = self._restored.pop(0)
            batch = PromptBatch(**saved["batch"])
            if "rollouts" in saved:
                produced = Produced(batch, Rollouts(**saved["rollouts"]), saved["version"], saved["index"])
                self.pending.append(InFlight(batch, saved["index"], saved["version"], -1, _done(produced)))
                continue
            wanted = saved["version"] if saved["version"] in self._restored_weights else None
            if wanted != loaded:
                if not self._queue_load(self._weights_then(wanted)):
                    self._restored.insert(0, saved)  # the checkpoint will hold it again
                    break
                loaded = wanted
            self.pending.append(self._produce(batch, n, sampling, saved["index"], saved["version"]))
        if loaded is not None and (self._lost is not None or not self._queue_load(_weights(self._source))):
            self._current = False  # the trainer's weights are not loaded after them: first next time
            return False
        if not self._restored:
            self._restored_weights = {}
        return self._lost is None and not self._restored

    def _weights_then(self, version: int | None) -> dict[str, torch.Tensor]:
        """The trainer's weights with the tensors a checkpoint held for ``version`` in their place."""
        weights = _weights(self._source)
        for name, tensor in self._restored_weights.get(version, {}).items():
            weights[name] = tensor.to(weights[name].device)
        return weights

    def _weights_of(self, item: InFlight) -> dict[str, torch.Tensor] | None:
        """The tensors of the weights ``item`` is generated with that differ from the trainer's current ones,
        on the CPU; None (with a warning) when its buffer holds another load since."""
        slot = item.load % len(self._serials)
        if item.load < 0 or self._serials[slot] != item.load:
            logger.warning("AsyncRollouts: the weights batch %d is generated with are no longer held; the "
                           "checkpoint keeps its prompts, and a resumed run generates it with the current "
                           "weights", item.index)
            return None
        current = _weights(self._source)
        return {name: tensor.to("cpu", copy=True) for name, tensor in self._buffers[slot].items()
                if not torch.equal(tensor, current[name])}

    def _queue_load(self, weights: dict[str, torch.Tensor]) -> bool:
        """Copy ``weights`` into the next buffer (once the producer has loaded what it held before) and queue
        their load into the producer's policy; False when that wait ended without it (a stop request, the
        producer gone)."""
        slot = self._queued % len(self._loads)
        previous = self._loads[slot]  # loaded long ago in practice: its batch was taken before this step
        if previous is not None and not self._await(previous, "to load the weights of a buffer it reads"):
            return False
        with torch.no_grad():
            if slot == len(self._buffers):
                buffer = {name: tensor.clone() for name, tensor in weights.items()}
                if self.producer == "process":
                    for tensor in buffer.values():
                        tensor.share_memory_()
                self._buffers.append(buffer)
            else:
                for name, tensor in weights.items():
                    self._buffers[slot][name].copy_(tensor)
        # a process loads into its own engine's policy
        mine, engine = (None, None) if self.producer == "process" else (self.copy, self.engine)
        self._serials[slot] = self._queued
        self._loads[slot] = self._pool_submit(_load, engine, mine, self._buffers[slot])
        self._queued += 1
        return True

    def _produce(self, batch: PromptBatch, n: int, sampling: SamplingParams, index: int,
                 version: int | None = None) -> InFlight:
        """Hand one pipeline batch to the producer, generated with the weights loaded last (policy
        ``version``, the current one unless given). Drawn from its own stream (the run's seed, the batch's
        index and the rank); at ``max_staleness: 0`` from the trainer's random state instead, as the
        synchronous engine (a thread shares it; a process is handed a copy, and hands back where it left
        it)."""
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        rng = (self.seed, index, rank) if self.max_staleness else None
        version = self.version if version is None else version
        job = self._submit("rollout", (batch, n, sampling), rng)
        future = _then(job, lambda done: Produced(batch, done[0], version, index, done[1], done[2], done[3]))
        return InFlight(batch, index, version, self._queued - 1, future)

    def _give_back(self) -> None:
        """The step trains nothing: the batch it handed over goes back to be handed over first next time (the
        data counted it drawn), with its seed's index."""
        if self._handed is not None and self.pending and self.pending[-1] is self._handed:
            self.pending.pop()
            self.held.appendleft(self._handed.batch)
            self.submitted -= 1
        self._handed = None

    def _agree(self, ready: bool) -> bool:
        """Whether every rank has its batch (with several processes, a rank whose producer is gone or that was
        asked to stop while it waited gives the step back on every rank, so that they stay in step)."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return ready
        if torch.distributed.get_world_size() == 1:
            return ready
        every: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, ready)
        return all(every)

    def _now(self, method: str, *args) -> Rollouts:
        """``engine.<method>(*args)`` in the producer, waited for (the jobs before it first). It draws from
        the trainer's random state, as the synchronous engine: a thread shares it, a process is handed a copy
        and hands back where it left it."""
        self._check_bound()
        self._make_current()
        future = self._submit(method, args, None) if self._lost is None else None
        if future is not None:
            self._await(future, "for a batch outside the pipeline (validation or a refill)",
                        interruptible=False)
        if self._lost is not None:
            raise self._lost_error()
        out, started, ended, states = future.result()
        if states is not None:
            set_random_states(states)
        self._account(started, ended)
        return out

    def _trainer_states(self) -> dict[str, Any]:
        """The trainer's random states, those of CUDA when the producer's policy is there."""
        return random_states(cuda=any(p.is_cuda for p in self.copy.parameters()))

    def _submit(self, method: str, args: tuple, rng: tuple[int, int, int] | None) -> Future:
        """A job of the engine: with ``rng`` (the arguments of :func:`step_seed`) drawing from a stream of its
        own; without, from the trainer's random state (a process is handed a copy)."""
        if self.producer == "process":  # the process's engine and threads
            return self._pool_submit(_job, None, None, method, args, rng or self._trainer_states())
        return self._pool_submit(_job, self.engine, self.producer_threads, method, args, rng)

    def _pool_submit(self, fn: Callable, *args) -> Future:
        """``fn(*args)`` queued to the producer. A producer process starts here with the group signals
        blocked, so that none of them reaches it before it ignores them (:func:`_start_producer`). A producer
        found gone here is lost (:meth:`_lose`): the job is a future of that error."""
        self._progress = time.monotonic()
        job = None
        try:
            if self.producer == "thread":
                job = self._pool().submit(fn, *args)
            else:
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
                try:
                    job = self._pool().submit(fn, *args)
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        except BrokenProcessPool:
            pass  # lost below, outside this handler: its error is not chained to this one
        if job is None:
            self._lose(self._death("when the trainer handed it a job"))
            job = Future()
            job.set_exception(ProducerError(self._lost))
            return job
        if self.producer == "process" and self._process is None:
            self._process = next(iter((getattr(self._executor, "_processes", None) or {}).values()), None)
        self._jobs = [*(j for j in self._jobs if not j.done()), job]
        job.add_done_callback(self._finished)
        return job

    def _finished(self, job: Future) -> None:
        """A job ended (in the producer's thread, or the process pool's): the producer made progress."""
        self._progress, self._up = time.monotonic(), True
        if not job.cancelled() and job.exception() is None and isinstance(job.result(), tuple):
            _, started, ended, _ = job.result()
            self._slowest = max(self._slowest, ended - started)

    def _await(self, future: Future, what: str, interruptible: bool = True) -> bool:
        """Wait for ``future``, a job of the producer or its result: True once it is done (its own error
        included), False when the producer is gone (dead, or no job finished within :func:`stall_limit`:
        :meth:`_lose`) or, ``interruptible``, a stop was asked for. ``what``: what the trainer waits for, as
        the error says it."""
        while self._lost is None:
            if wait([future], timeout=POLL_S).done:
                if not future.cancelled() and isinstance(future.exception(), BrokenProcessPool):
                    self._lose(self._death(f"while the trainer waited {what}"))
                    break
                return True
            if interruptible and self._stop_requested():
                return False
            starting = self.producer == "process" and not self._up
            limit = stall_limit(self.producer_timeout_s, self._slowest, starting)
            if time.monotonic() - self._progress > limit:
                self._lose(self._stall(what, limit))
        return False

    def _stop_requested(self) -> bool:
        return bool(getattr(self._stop, "requested", False))

    def _lose(self, reason: str) -> None:
        """The producer is gone (``reason``): stop what is left of it and ask for the interrupt checkpoint
        (the step is then given back); without a callback to ask, raise at once."""
        self._lost = reason
        logger.error("%s", reason)
        self._kill()
        if self._stop is None:
            raise self._lost_error()
        if not self._stop.requested:
            self._stop.requested = True
            self._stop.received = f"AsyncRollouts: the rollout producer {self.producer} is gone"

    def _kill(self) -> None:
        """Stop the producer at once: SIGKILL to a process (it ignores the stop signals); a thread cannot be
        stopped, and is left to finish its job (it is a daemon: it does not hold the process at its exit)."""
        if self._executor is None:
            return
        if isinstance(self._executor, ProducerThread):
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._left = self._executor
        else:
            if self._process is not None:
                self._process.kill()
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._executor, self._process = None, None

    def _shut_down(self) -> None:
        """At the end of a fit: the jobs not started are cancelled and the one in progress finished (within
        the limit), unless the producer is gone or, for a process, a stop was asked for: it is killed then."""
        for job in self._jobs:
            job.cancel()
        thread = isinstance(self._executor, ProducerThread)
        waits = self._lost is None and (thread or not self._stop_requested())
        for job in self._jobs if waits else ():
            if not self._await(job, "for its last job before it stops", interruptible=False):
                break
        if self._lost is None and waits:
            self._executor.shutdown(wait=True)
            self._executor, self._process = None, None
        else:
            self._kill()

    def _who(self) -> str:
        if self._process is None:
            return f"the producer {self.producer}"
        state = process_state(self._process.pid)
        return f"the producer process (pid {self._process.pid}{'; ' + state if state else ''})"

    def _stall(self, what: str, limit: float) -> str:
        option = (f"the automatic limit: {AUTOMATIC_FACTOR:g} x its slowest job so far, at least "
                  f"{AUTOMATIC_FLOOR_S:g} s")
        if self.producer_timeout_s is not None:
            option = f"producer_timeout_s={self.producer_timeout_s:g}"
        fate = ("it was killed" if self._process is not None else
                "a thread cannot be stopped: it is left to finish in the background")
        return (f"AsyncRollouts: {self._who()} finished no job in {limit:g} s while the trainer waited "
                f"{what} ({option}); {fate}. Find what holds it (a debugger's SIGSTOP, a hung device or "
                "network file system, a tool call without a time limit), or raise producer_timeout_s if a "
                "batch can take that long.")

    def _death(self, when: str) -> str:
        process = self._process
        code = None
        if process is not None:
            deadline = time.monotonic() + 5  # the process pool's own thread may be reaping it
            while (code := process.exitcode) is None and time.monotonic() < deadline:
                process.join(timeout=0.1)
        how, fix = exit_description(code)
        who = f"the producer process (pid {process.pid})" if process is not None else "the producer process"
        return f"AsyncRollouts: {who} died, {how}, {when}. {fix}"

    def _lost_error(self) -> ProducerError:
        """The error a lost producer ends the run with: why, and the checkpoint to resume from."""
        saved = getattr(self._stop, "saved_path", None)
        if saved is not None:
            then = (f" The run stopped after a checkpoint that resumes it exactly: resume with --ckpt_path "
                    f"{saved} once the cause is fixed.")
        else:
            then = (" The run stopped without a checkpoint of its own (SaveOnInterrupt, which lit-grpo fit "
                    "adds, writes one): resume from the latest one with --ckpt_path.")
        return ProducerError(self._lost + then)

    def _untrained_error(self) -> ProducerError | None:
        """The producer's error on a batch handed over at the end of the fit, which no step trains (not the
        end of a process stopped after a stop request)."""
        for item in self.pending:
            job = item.future
            err = job.exception() if job.done() and not job.cancelled() else None
            if err is not None and not isinstance(err, BrokenProcessPool):
                logger.error("AsyncRollouts: the producer's error on batch %d", item.index, exc_info=err)
                return ProducerError(
                    f"AsyncRollouts: the producer {self.producer} raised on batch {item.index}, handed over "
                    f"at the end of the fit and not trained: {type(err).__name__}: {err} (its traceback is "
                    "logged above)")
        return None

    def _account(self, started: float, ended: float) -> None:
        """Add the producer's idle time before a job (jobs run one at a time, in the order handed over); a
        batch a checkpoint held (no times) was not produced here."""
        if not ended:
            return
        if self._idle_since is not None:
            self._step["producer_wait_s"] += max(0.0, started - self._idle_since)
        self._idle_since = ended

    def _pool(self) -> Executor:
        if self._executor is None:  # one worker: jobs run in the order they were handed over
            if self._left is not None:  # a thread a stop left running: its job ends before another starts
                self._left.join(stall_limit(self.producer_timeout_s, self._slowest))
                self._left = None
            self._up = False
            if self.producer == "thread":
                self._executor = ProducerThread("lit-grpo-rollouts")
            else:  # the process gets the engine (and its policy) once, the weights through the buffers
                self.copy.share_memory()
                self._executor = ProcessPoolExecutor(
                    max_workers=1, mp_context=torch.multiprocessing.get_context("spawn"),
                    initializer=_start_producer,
                    initargs=(self.engine, self.producer_threads or torch.get_num_threads()))
        return self._executor

    def _check_bound(self) -> None:
        require(self.copy is not None, "AsyncRollouts used before bind(policy, tokenizer)")

    @staticmethod
    def _new_step() -> dict[str, Any]:
        return {"staleness": [], "queue_wait_s": 0.0, "sync_wait_s": 0.0, "producer_wait_s": 0.0}

    def __getstate__(self) -> dict[str, Any]:  # the producer stays behind (configs are deep-copied)
        return {**self.__dict__, "_executor": None, "_process": None, "_left": None, "_stop": None,
                "_jobs": [], "_handed": None, "pending": deque(), "_loads": [None] * len(self._loads)}


#: The engine of a producer process (``producer: process``), set when it starts.
_PRODUCER_ENGINE: RolloutEngine | None = None


def _start_producer(engine: RolloutEngine, threads: int | None) -> None:
    """In a producer process: die with the trainer, ignore the signals sent to the whole process group (the
    trainer decides what an interrupt stops, and stops this process), take the engine and the thread count."""
    global _PRODUCER_ENGINE
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no producer outlives its trainer
    except AttributeError:  # not Linux
        pass
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)  # blocked since the start: discarded now
    if threads is not None:
        torch.set_num_threads(threads)
    _PRODUCER_ENGINE = engine


def _load(engine: RolloutEngine | None, policy: nn.Module | None, weights: dict[str, torch.Tensor]) -> float:
    """In the producer: copy ``weights`` into its policy (a producer process's own engine's when None) and let
    the engine take them."""
    engine = engine or _PRODUCER_ENGINE
    policy = policy if policy is not None else engine.policy
    with torch.no_grad():
        mine = policy.state_dict(keep_vars=True)
        for name, tensor in weights.items():
            mine[name].copy_(tensor)
    return engine.sync_weights(policy)


def _job(engine: RolloutEngine | None, threads: int | None, method: str, args: tuple,
         rng: tuple[int, int, int] | dict[str, Any] | None) -> tuple[Any, float, float, dict | None]:
    """``engine.<method>(*args)`` (a producer process's own engine when None). ``rng``: the arguments of
    :func:`step_seed`, tokens drawn from a stream of their own seeded so (in a process, its global generators
    seeded too, for a sampler that draws from them); or the trainer's random states, which a process draws
    from and hands back as it left them; None: the process's (a thread's: the trainer's, shared). The result,
    the monotonic times it began and ended, and those random states."""
    with _threads(threads):
        stream = nullcontext()
        if isinstance(rng, dict):
            set_random_states(rng)
        elif rng is not None:
            if engine is None:  # a process of its own: nothing else draws from its generators
                seed_step(*rng)
            stream = own_stream(step_seed(*rng))
        started = time.monotonic()
        with stream:
            out = getattr(engine or _PRODUCER_ENGINE, method)(*args)
        ended = time.monotonic()
        states = random_states(cuda=True) if isinstance(rng, dict) else None
        return out, started, ended, states


def _then(future: Future, fn: Callable[[Any], Any]) -> Future:
    """A future of ``fn(future.result())`` (the same exception when ``future`` fails)."""
    chained: Future = Future()

    def finish(done: Future) -> None:
        if done.cancelled():  # close() dropped it
            chained.cancel()
        elif done.exception() is not None:
            chained.set_exception(done.exception())
        else:
            chained.set_result(fn(done.result()))

    future.add_done_callback(finish)
    return chained


def _weights(policy: nn.Module) -> dict[str, torch.Tensor]:
    """``policy``'s weights (its state dict's tensors, detached)."""
    return {name: tensor.detach() for name, tensor in policy.state_dict(keep_vars=True).items()}


def _fields(batch: PromptBatch) -> dict[str, Any]:
    return {f.name: getattr(batch, f.name) for f in fields(batch)}


def _plain(produced: Produced) -> dict[str, Any]:
    """``produced`` as plain lists, numbers and CPU tensors (without its rollouts when they are episodes)."""
    batch, rollouts = produced.batch, produced.rollouts
    out = {"batch": _fields(batch), "version": produced.version, "index": produced.index}
    if rollouts.episodes is None:
        on_cpu = rollouts.to("cpu")
        out["rollouts"] = {f.name: getattr(on_cpu, f.name) for f in fields(on_cpu) if f.name != "episodes"}
    return out


def _done(produced: Produced) -> Future:
    future: Future = Future()
    future.set_result(produced)
    return future


@contextmanager
def _threads(count: int | None):
    """``torch.set_num_threads(count)`` for the block, in this thread."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
