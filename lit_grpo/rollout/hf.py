"""Rollouts from the policy module itself: the project's own decoding loop, or Hugging Face ``generate``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Literal

import torch
from torch import nn

from lit_grpo.checks import require
from lit_grpo.logprobs import token_logprobs
from lit_grpo.lora import base_model, merged_for_inference
from lit_grpo.parallel import generation_view
from lit_grpo.rollout import decode as own
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.functional import (
    completion_mask,
    encode_prompts,
    eos_token_ids,
    pad_prompts,
    unpad_prompts,
)
from lit_grpo.rollout.prefill import prompt_cache
from lit_grpo.rollout.turns import EpisodeCache, Turns
from lit_grpo.types import Rollouts, SamplingParams

#: The engine settings that draw Hugging Face ``generate``'s tokens from the same seed: how the runs published
#: before the fast defaults drew, each of which pins them (docs/performance.md, "Own decoding loop")
GENERATE_DRAWS = {"shrink": False, "sampler": "multinomial"}
#: :data:`GENERATE_DRAWS` as the one ``lit-grpo fit`` argument that pins them
GENERATE_DRAWS_ARG = "--model.engine=" + json.dumps({"class_path": "lit_grpo.HFGenerateEngine",
                                                     "init_args": GENERATE_DRAWS})
#: The same for the HF engine inside an episode engine (``model.engine.init_args.engine``): how the agent
#: runs published before the episodes' fast defaults drew (docs/agents.md)
EPISODE_DRAWS_ARG = "--model.engine.init_args.engine=" + json.dumps(
    {"class_path": "lit_grpo.HFGenerateEngine", "init_args": GENERATE_DRAWS})


class HFGenerateEngine(RolloutEngine):
    """Batched sampling on the policy itself (no weights to sync): ``n`` left-padded samples per prompt.

    The defaults are the fastest settings whose samples keep the policy's distribution exactly
    (docs/performance.md, "Own decoding loop", says why each is exact and what it saves). Sampling log-probs
    are those of ``logits / temperature`` before top-p/top-k, which the training forward reproduces. A model
    the own loop cannot serve exactly generates with ``generate``, saying why once.

    Args:
        decoder: ``own`` (the project's loop, :mod:`lit_grpo.rollout.decode`) or ``generate`` (Hugging Face).
        shrink: Own loop: rows that emitted EOS leave the batch. ``false`` with ``sampler: multinomial`` draws
            the tokens ``generate`` draws from the same seed (how runs published before these defaults drew).
        sampler: Own loop: ``inverse_cdf`` (one uniform number a row) or ``multinomial`` (``generate``'s).
        batch_size: Completions per call (``None``: all at once); lower it when generation runs out of memory.
        use_cache: Decode with a key/value cache (without it, ``generate`` runs every token over the text).
        merge_lora: Fold LoRA adapters into copies of the adapted weights while generating (FSDP: unfolded).
        shared_prefill: Prefill each distinct prompt once and start its ``n`` rows from copies of its cache.
        episode_cache_mib: Multi-turn episodes keep each one's keys and values from one turn to the next, so a
            turn computes only its new tokens (:class:`~lit_grpo.rollout.turns.EpisodeCache`), within this
            many MiB for a rollout's episodes together (past it, they go on from their whole histories, saying
            why); 0: every turn computes the whole histories.
    """

    def __init__(self, decoder: Literal["own", "generate"] = "own", shrink: bool = True,
                 sampler: Literal["multinomial", "inverse_cdf"] = "inverse_cdf",
                 batch_size: int | None = None, use_cache: bool = True, merge_lora: bool = True,
                 shared_prefill: bool = True, episode_cache_mib: int = 4096) -> None:
        require(episode_cache_mib >= 0,
                f"episode_cache_mib={episode_cache_mib} must be >= 0 (0: no cache between episode turns)")
        require(batch_size is None or batch_size >= 1,
                f"batch_size={batch_size} must be >= 1 (or null for one call)")
        require(decoder in ("own", "generate"),
                f"decoder={decoder!r} is not a decoder; choose 'own' (the project's loop) or 'generate'")
        require(sampler in own.SAMPLERS,
                f"sampler={sampler!r} is not a sampler; choose one of {', '.join(own.SAMPLERS)}")
        self.decoder = decoder
        # the own loop's settings: generate keeps every row to the end and draws with torch.multinomial
        self.shrink = shrink and decoder == "own"
        self.sampler = sampler if decoder == "own" else "multinomial"
        self.batch_size = batch_size
        self.use_cache = use_cache
        self.merge_lora = merge_lora
        self.shared_prefill = shared_prefill
        self.episode_cache_mib = episode_cache_mib
        self.policy: nn.Module | None = None
        self.tokenizer = None

    def bind(self, policy: nn.Module, tokenizer) -> None:
        require(tokenizer.pad_token_id is not None,
                "the tokenizer has no pad token; set one (e.g. tokenizer.pad_token = tokenizer.eos_token) "
                "and save it with the model")
        self.policy, self.tokenizer = policy, tokenizer

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> Rollouts:
        if self.policy is None:
            raise RuntimeError("HFGenerateEngine.generate() called before bind(policy, tokenizer)")
        prompt_ids = unpad_prompts(*encode_prompts(self.tokenizer, prompts))
        self._check_context(prompt_ids, sampling.max_new_tokens)
        return self.generate_ids(prompt_ids, n, sampling)

    def _check_context(self, prompt_ids: list[list[int]], max_new_tokens: int) -> None:
        """Refuse prompts whose completions would run past the model's context (``max_position_embeddings``):
        transformers only warns and samples at positions the model never saw."""
        context = self.max_sequence_length()
        if context is None:
            return
        over = [(i, len(ids)) for i, ids in enumerate(prompt_ids) if len(ids) + max_new_tokens > context]
        i, length = max(over, key=lambda pair: pair[1], default=(0, 0))
        fix = f"or lower sampling.max_new_tokens to at most {context - length}" if length < context else \
            "it alone fills the context"
        require(not over,
                f"{len(over)} of {len(prompt_ids)} prompts leave no room for "
                f"max_new_tokens={max_new_tokens} in the model's {context}-token context "
                f"(max_position_embeddings); the longest, prompt {i} of the batch, has {length} tokens. "
                f"Shorten the prompts or drop the long rows from the data ({fix})")

    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        return self.continue_ids(prompt_ids, n, sampling)

    @torch.no_grad()
    def continue_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams,
                     held: list[own.Kept | None] | None = None,
                     keep: dict[int, own.Kept] | None = None) -> Rollouts:
        """:meth:`generate_ids`, where each prompt's first tokens may be ``held`` already (the keys and values
        of its first ``L`` tokens, :data:`~lit_grpo.rollout.decode.Kept`; None: none), so that only the rest
        is computed; ``keep`` receives each row's keys and values (all but its last sampled token's) where the
        own loop samples it. The episode cache's path (:class:`~lit_grpo.rollout.turns.EpisodeCache`)."""
        if self.policy is None:
            raise RuntimeError("HFGenerateEngine.generate_ids() called before bind(policy, tokenizer)")
        device = next(self.policy.parameters()).device
        held = held or [None] * len(prompt_ids)
        tails = [p[0 if h is None else h[0][0].shape[1] :] for p, h in zip(prompt_ids, held, strict=True)]
        ids, mask = pad_prompts(tails, self.tokenizer.pad_token_id)  # [P, Tp] what is left to compute
        ids, mask = ids.to(device), mask.to(device)
        group = torch.arange(len(prompt_ids), device=device).repeat_interleave(n)  # [N] each row's prompt
        whole, whole_mask = pad_prompts(prompt_ids, self.tokenizer.pad_token_id)  # [P, Tp']
        prompt_ids, prompt_mask = whole.to(device)[group], whole_mask.to(device)[group]  # [N, Tp']
        step = self.batch_size or prompt_ids.shape[0]
        was_training = self.policy.training
        self.policy.eval()
        try:
            chunks = []
            for i in range(0, prompt_ids.shape[0], step):
                rows = group[i : i + step]
                past = own.Past.of([held[r] for r in rows.tolist()], ids.shape[1] + sampling.max_new_tokens)
                kept: dict[int, own.Kept] = {}
                chunks.append(self._generate(ids, mask.long(), rows, sampling, past,
                                             None if keep is None else kept))
                if keep is not None:
                    keep.update({i + row: states for row, states in kept.items()})
        finally:
            self.policy.train(was_training)
        t = max(c[0].shape[1] for c in chunks)
        ids = torch.cat([nn.functional.pad(c[0], (0, t - c[0].shape[1]), value=self.tokenizer.pad_token_id)
                         for c in chunks])  # [N, T]
        logprobs = torch.cat([nn.functional.pad(c[1], (0, t - c[1].shape[1])) for c in chunks])  # [N, T]
        mask, truncated = completion_mask(ids, self.eos_ids())
        return Rollouts(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=ids.masked_fill(~mask, self.tokenizer.pad_token_id),
            completion_mask=mask,
            logprobs=logprobs * mask,
            texts=self.tokenizer.batch_decode(ids.masked_fill(~mask, self.tokenizer.pad_token_id),
                                              skip_special_tokens=True),
            truncated=truncated,
            group_size=n,
        )

    def turns(self) -> Turns:
        """Episodes continue from each one's cache (:class:`~lit_grpo.rollout.turns.EpisodeCache`), unless
        ``episode_cache_mib`` is 0."""
        return EpisodeCache(self, self.episode_cache_mib * 2**20) if self.episode_cache_mib else Turns(self)

    def cache_bytes_per_token(self) -> int | None:
        """Bytes of keys and values one token takes in the policy's cache (None where its config does not
        say)."""
        config = getattr(self.policy, "config", None)
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        layers, heads = getattr(text, "num_hidden_layers", None), getattr(text, "num_attention_heads", None)
        if not layers or not heads:
            return None
        size = getattr(text, "head_dim", None) or text.hidden_size // heads
        kv = getattr(text, "num_key_value_heads", None) or heads
        return 2 * layers * kv * size * next(self.policy.parameters()).element_size()

    def max_sequence_length(self) -> int | None:
        """The policy config's ``max_position_embeddings`` (None when it has none)."""
        config = getattr(self.policy, "config", None)
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        return getattr(text, "max_position_embeddings", None)

    def eos_ids(self) -> list[int]:
        """The ids that end a completion (:func:`~lit_grpo.rollout.functional.eos_token_ids`)."""
        return eos_token_ids(self.policy, self.tokenizer)

    def _generate(self, ids, mask, rows, sampling: SamplingParams, past: own.Past | None = None,
                  keep: dict[int, own.Kept] | None = None):
        """Completions and their log-probs for the rows ``rows [n]`` of the prompts ``ids, mask [P, Tp]``
        (after their ``past``, which only the own loop reads; ``keep``: see :func:`~lit_grpo.rollout.decode.
        decode`)."""
        with generation_view(self.policy) as model, self._folded(model), _diverged():
            cache = self._prompt_cache(base_model(model), ids, mask, rows) if past is None else None
            if self.decoder == "own" and self._serves(base_model(model)):
                try:
                    return own.decode(base_model(model), ids[rows], mask[rows], sampling, self.eos_ids(),
                                      self.tokenizer.pad_token_id, prefix=cache, shrink=self.shrink,
                                      sampler=self.sampler, past=past, keep=keep)
                except own.NotServed as refused:  # found before any random number was drawn
                    own.FALLBACK.say(str(refused))
                    own.FALLBACK.remember(base_model(model), str(refused))
            if past is not None:  # generate cannot start from it: only a cache the own loop kept is given
                raise RuntimeError("a held episode cache was given for a model the own decoding loop does "
                                   "not serve; generate from the whole token histories instead")
            recorder = SampledLogprobs(sampling.temperature or 1.0)
            with recorder.attached(base_model(model)):
                out = self._call_generate(model, ids[rows], mask[rows], cache, sampling)
        new = out.sequences[:, ids.shape[1] :]  # [n, T]
        return new, recorder.finish(new)

    def _serves(self, model: nn.Module) -> bool:
        """Whether the own loop can sample ``model`` (the HF model); says once why not."""
        reason = own.refusal(model, self.use_cache)
        if reason is not None:
            own.FALLBACK.say(reason)
        return reason is None

    def _prompt_cache(self, model: nn.Module, ids, mask, rows):
        """The shared prompt cache for ``rows`` (None for the plain path)."""
        if not self.shared_prefill:
            return None
        distinct, index = torch.unique_consecutive(rows, return_inverse=True)  # [U], [n]
        return prompt_cache(model, ids[distinct], mask[distinct], index, self.use_cache)

    def _call_generate(self, model: nn.Module, ids, mask, cache, sampling: SamplingParams):
        greedy = sampling.temperature == 0
        given = {} if cache is None else {"past_key_values": cache}  # only the last prompt token left to run
        return self._sample(model, ids, mask, given, sampling, greedy)

    def _sample(self, model: nn.Module, ids, mask, given: dict, sampling: SamplingParams, greedy: bool):
        return model.generate(  # base_model(model)'s forward is the one generate calls
            input_ids=ids,
            attention_mask=mask,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy or sampling.top_k == 0 else sampling.top_k,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_ids() or None,
            use_cache=self.use_cache,
            return_dict_in_generate=True,
            **given,
        )

    def _folded(self, model: nn.Module):
        return merged_for_inference(model) if self.merge_lora else nullcontext()


@contextmanager
def _diverged() -> Iterator[None]:
    """Turn torch's complaint about non-finite sampling probabilities into an error that says what to do."""
    try:
        yield
    except RuntimeError as err:
        if "probability tensor contains" not in str(err):
            raise
        raise FloatingPointError(
            "sampling stopped: the policy's next-token probabilities are not finite (inf or NaN logits), "
            "so its weights have diverged. Resume from an earlier checkpoint with a lower optim.lr or "
            "optim.max_grad_norm "
            f"(torch said: {err})"
        ) from err


class SampledLogprobs:
    """Log-probs of the sampled tokens under the raw logits divided by ``temperature``, read from the model's
    forward calls during ``generate``: each call's last-position logits ``[n, V]`` are kept only until the
    next call shows which token was sampled from them, so the ``[n, T, V]`` logits of the whole generation
    never exist at once. The values are those of ``output_logits=True`` (raw logits, before any
    processor or top-p/top-k filter)."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # [n, V] logits of the latest call
        self.steps: list[torch.Tensor] = []  # T x [n]

    @contextmanager
    def attached(self, policy: nn.Module) -> Iterator[None]:
        handles = [policy.register_forward_pre_hook(self._before, with_kwargs=True),
                   policy.register_forward_hook(self._after, with_kwargs=True)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _before(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self.pending is not None and ids is not None:
            self._take(ids[:, -1])  # the token sampled from the previous call's logits

    def _after(self, module, args, kwargs, output) -> None:
        self.pending = output.logits[:, -1]  # [n, V]

    def _take(self, sampled: torch.Tensor) -> None:
        self.steps.append(token_logprobs(self.pending, sampled, self.temperature))  # [n]
        self.pending = None

    def finish(self, new: torch.Tensor) -> torch.Tensor:
        """Log-probs ``[n, T]`` of the generated tokens ``new [n, T]``."""
        if self.pending is not None:
            self._take(new[:, -1])
        t = new.shape[1]
        if len(self.steps) < t:
            raise RuntimeError(f"generate made {len(self.steps)} model calls for {t} new tokens")
        return torch.stack(self.steps[:t], dim=1) if t else new.new_zeros(new.shape, dtype=torch.float32)
