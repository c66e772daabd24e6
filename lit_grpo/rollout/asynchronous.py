"""Asynchronous rollouts: the next batch is generated while the trainer updates on an earlier one."""

from __future__ import annotations

import copy
import ctypes
import logging
import signal
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch
from torch import nn

from lit_grpo.checks import require
from lit_grpo.parallel import seed_step, step_seed
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.decode import own_stream
from lit_grpo.rollout.hf import HFGenerateEngine
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams

logger = logging.getLogger(__name__)

#: The signals a scheduler sends to a whole process group (Slurm, Kubernetes, a terminal's Ctrl-C): a
#: producer process ignores them, so that it finishes its batch for the trainer's interrupt checkpoint and
#: is stopped by the trainer (``SaveOnInterrupt``), and blocks them while it starts.
GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


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
    """

    def __init__(self, engine: RolloutEngine | None = None, max_staleness: int = 1,
                 producer_threads: int | None = None, producer: Literal["thread", "process"] = "thread",
                 correction: Literal["truncated_is", "none"] = "truncated_is") -> None:
        require(max_staleness >= 0,
                f"AsyncRollouts: max_staleness={max_staleness} must be >= 0 (0: synchronous)")
        require(producer_threads is None or producer_threads >= 1,
                f"AsyncRollouts: producer_threads={producer_threads} must be >= 1, or null for the process's")
        require(producer in ("thread", "process"),
                f"AsyncRollouts: producer={producer!r}; use 'thread' or 'process'")
        require(correction in ("truncated_is", "none"),
                f"AsyncRollouts: correction={correction!r}; use one of truncated_is, none")
        self.engine = engine if engine is not None else HFGenerateEngine()
        require(not any(c.__name__ == "VLLMEngine" for c in type(self.engine).__mro__),
                "AsyncRollouts does not run VLLMEngine: vLLM keeps its own copy of the weights and its own "
                "workers, and a producer around it is not tested. Use VLLMEngine as the module's engine "
                "(synchronous), or HFGenerateEngine inside AsyncRollouts")
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
        self.correction = correction
        self.copy: nn.Module | None = None
        self.pending: deque[Future] = deque()  # the batches handed to the producer, oldest first
        self.version = 0  # weight copies into the producer's policy so far
        self.submitted = 0  # batches handed to the producer so far (their seeds' index)
        self.seed: int | None = None
        self._source: nn.Module | None = None  # the trainer's policy, whose weights the producer loads
        self._current = False  # whether the producer has the trainer's weights of this fit
        self._buffers: list[dict[str, torch.Tensor]] = []  # weight buffers, used in turn
        self._loads: list[Future | None] = [None] * (max_staleness + 1)  # each buffer's latest load
        self._queued = 0  # weight loads queued so far
        self._executor: Executor | None = None
        # a resumed run's batches in flight, as the checkpoint held them
        self._restored: list[dict[str, Any]] = []
        self._idle_since: float | None = None  # when the producer finished its latest job (time.monotonic())
        self._step: dict[str, Any] = self._new_step()

    # ---- the engine interface ---------------------------------------------------------------------------
    def bind(self, policy: nn.Module, tokenizer) -> None:
        sharded = (any(hasattr(p, "full_tensor") for p in policy.parameters())
                   or "FullySharded" in type(policy).__name__)
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
        pipeline fills (the first ``max_staleness`` steps)."""
        self._check_bound()
        self._make_current()
        if self.seed is None:
            self.seed = torch.initial_seed()
        for saved in self._restored:  # a resumed run: the batches its checkpoint held come first
            batch_then = PromptBatch(**saved["batch"])
            if "rollouts" in saved:
                rollouts = Rollouts(**saved["rollouts"])
                self.pending.append(_done(Produced(batch_then, rollouts, saved["version"], saved["index"])))
            else:  # episodes: generated again, with the current weights
                self.pending.append(self._produce(batch_then, n, sampling, saved["index"]))
        self._restored = []
        self.pending.append(self._produce(batch, n, sampling, self.submitted))
        self.submitted += 1
        if len(self.pending) <= self.max_staleness:  # nothing to train yet: wait, so that no step starts (and
            for future in self.pending:  # seeds the random generator a sampler without a stream of its own
                future.exception()  # shares) while it generates
            return None
        started = time.perf_counter()
        produced = self.pending.popleft().result()  # the producer's exception (and traceback) ends the step
        self._step["queue_wait_s"] += time.perf_counter() - started
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
        self._queue_load(policy)
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
        holds them), let the job in progress finish and stop the producer (its thread or process)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self.pending.clear()
        self._loads = [None] * (self.max_staleness + 1)
        self._current = False  # a later fit starts from the trainer's weights then

    # ---- checkpoints ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The finished batches not yet trained (plain lists and tensors, which
        ``torch.load(weights_only=True)`` reads), with the counters that seed and version the next ones.
        Multi-turn episodes keep only their prompts: an episode's environment state need not be storable, so a
        resumed run generates those batches again."""
        waiting = [f.result() for f in self.pending]
        return {"max_staleness": self.max_staleness, "version": self.version, "submitted": self.submitted,
                "seed": self.seed, "pending": [*map(_plain, waiting), *self._restored]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        require(state["max_staleness"] == self.max_staleness,
                f"AsyncRollouts: the checkpoint was written with max_staleness={state['max_staleness']}, "
                f"this run has {self.max_staleness}; its {len(state['pending'])} batches in flight were "
                f"drawn for that pipeline. Resume with max_staleness={state['max_staleness']}")
        self.version, self.submitted, self.seed = state["version"], state["submitted"], state["seed"]
        self._restored = list(state["pending"])
        self._current = False  # the trainer's weights are restored after this: loaded before the next batch

    # ---- the producer -------------------------------------------------------------------------------------
    def _make_current(self) -> None:
        """At a fit's first batch or validation: queue the trainer's weights (a resumed run's restored ones;
        no version more)."""
        if not self._current:
            self._queue_load(self._source)
            self._current = True

    def _queue_load(self, policy: nn.Module) -> None:
        """Copy ``policy``'s weights into the next buffer (once the producer has loaded what it held before)
        and queue their load into the producer's policy."""
        slot = self._queued % len(self._loads)
        if self._loads[slot] is not None:
            self._loads[slot].result()  # loaded long ago in practice: its batch was taken before this step
        with torch.no_grad():
            weights = {name: tensor.detach() for name, tensor in policy.state_dict(keep_vars=True).items()}
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
        self._loads[slot] = self._pool_submit(_load, engine, mine, self._buffers[slot])
        self._queued += 1

    def _produce(self, batch: PromptBatch, n: int, sampling: SamplingParams, index: int) -> Future:
        """Hand one pipeline batch to the producer: a future of its :class:`Produced`. Drawn from its own
        stream (the run's seed, the batch's index and the rank); at ``max_staleness: 0`` from the trainer's
        random state instead, as the synchronous engine (a thread shares it; a process is handed a copy)."""
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if self.max_staleness:
            rng = (self.seed, index, rank)
        elif self.producer == "thread":
            rng = None
        else:
            rng = torch.get_rng_state()
        version = self.version
        return _then(self._submit("rollout", (batch, n, sampling), rng),
                     lambda done: Produced(batch, done[0], version, index, done[1], done[2]))

    def _now(self, method: str, *args) -> Rollouts:
        """``engine.<method>(*args)`` in the producer, waited for (the jobs before it first)."""
        self._check_bound()
        self._make_current()
        out, started, ended = self._submit(method, args, None).result()
        self._account(started, ended)
        return out

    def _submit(self, method: str, args: tuple, rng: tuple[int, int, int] | torch.Tensor | None) -> Future:
        if self.producer == "process":
            return self._pool_submit(_job, None, None, method, args, rng)  # the process's engine and threads
        return self._pool_submit(_job, self.engine, self.producer_threads, method, args, rng)

    def _pool_submit(self, fn: Callable, *args) -> Future:
        """``fn(*args)`` queued to the producer. A producer process starts here with the group signals
        blocked, so that none of them reaches it before it ignores them (:func:`_start_producer`)."""
        if self.producer == "thread":
            return self._pool().submit(fn, *args)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
        try:
            return self._pool().submit(fn, *args)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

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
            if self.producer == "thread":
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lit-grpo-rollouts")
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

    def __getstate__(self) -> dict[str, Any]:  # the thread pool stays behind (configs are deep-copied)
        return {**self.__dict__, "_executor": None, "pending": deque(), "_loads": [None] * len(self._loads)}


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
         rng: tuple[int, int, int] | torch.Tensor | None) -> tuple[Any, float, float]:
    """``engine.<method>(*args)`` (a producer process's own engine when None); with ``rng`` the arguments of
    :func:`step_seed`, tokens drawn from a stream of their own seeded so (in a process, its global generators
    seeded too, for a sampler that draws from them), or a random state to start from; the result with the
    monotonic times it began and ended."""
    with _threads(threads):
        stream = nullcontext()
        if isinstance(rng, torch.Tensor):
            torch.set_rng_state(rng)
        elif rng is not None:
            if engine is None:  # a process of its own: nothing else draws from its generators
                seed_step(*rng)
            stream = own_stream(step_seed(*rng))
        started = time.monotonic()
        with stream:
            out = getattr(engine or _PRODUCER_ENGINE, method)(*args)
        return out, started, time.monotonic()


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


def _plain(produced: Produced) -> dict[str, Any]:
    """``produced`` as plain lists, numbers and CPU tensors (without its rollouts when they are episodes)."""
    batch, rollouts = produced.batch, produced.rollouts
    out = {"batch": {f.name: getattr(batch, f.name) for f in fields(batch)}, "version": produced.version,
           "index": produced.index}
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
