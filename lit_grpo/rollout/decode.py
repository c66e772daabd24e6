"""The HF engine's own decoding loop: sampling from a Hugging Face causal LM without ``generate``.

It does what ``generate`` does for the engine's settings, step for step (float32 logits, then temperature,
top-k and top-p in ``generate``'s order, its stopping and padding), so that ``shrink=False`` with
``sampler="multinomial"`` draws ``generate``'s tokens from the same seed. What it does differently, each
exact: a key/value cache allocated once per batch and written in place (:class:`BufferCache`); a shared
prompt cache copied in once; grouped-query heads shared inside SDPA (:func:`gqa_sdpa_attention`); with
``shrink``, finished rows leaving the batch (:meth:`BufferCache.keep_rows`); with
``sampler="inverse_cdf"``, one uniform number a row (:func:`inverse_cdf`). The last two draw other samples
from the same distribution. Log-probs are of the sampled token under ``logits / temperature`` before
top-k/top-p. Models it cannot serve exactly (:func:`refusal`) keep ``generate``; the step is not compiled.
docs/performance.md ("Own decoding loop") gives the reasons and the measurements.

Shapes: ``N`` rows, ``Tp`` prompt tokens, ``T`` new tokens, ``V`` vocabulary, ``H`` key/value heads, ``D``
head size.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import AttentionInterface

try:  # transformers >= 4.53 builds masks per attention implementation; before, the models compare its name
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
except ImportError:  # pragma: no cover - the older transformers of the supported range
    AttentionMaskInterface = sdpa_mask = None

from lit_grpo.logprobs import token_logprobs
from lit_grpo.perf import Fallback, attention_refusal
from lit_grpo.types import SamplingParams

#: Generation-config fields that make ``generate`` add a logits processor, stopping criterion or decoding mode
#: beyond temperature/top-k/top-p, EOS and max_new_tokens, with the values that leave it out.
_NEUTRAL: dict[str, tuple] = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,),
    "sequence_bias": (None,),
    "guidance_scale": (None, 1.0), "min_length": (None, 0), "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,), "forced_eos_token_id": (None,), "remove_invalid_values": (None, False),
    "exponential_decay_length_penalty": (None,), "suppress_tokens": (None,), "begin_suppress_tokens": (None,),
    "top_h": (None,), "min_p": (None,), "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0), "watermarking_config": (None,), "renormalize_logits": (None, False),
    "max_time": (None,), "stop_strings": (None,), "num_beams": (None, 1), "penalty_alpha": (None,),
    "cache_implementation": (None,), "prompt_lookup_num_tokens": (None,),
}


FALLBACK = Fallback(logging.getLogger(__name__), "decoder='own': generating with generate instead: %s")


class NotServed(RuntimeError):
    """The model's forward did not use the cache it was given (found at the first forward, before any
    sampling)."""


def refusal(model: nn.Module, use_cache: bool) -> str | None:
    """Why the loop cannot sample ``model`` exactly as ``generate`` would (None when it can)."""
    name = type(model).__name__
    if not use_cache:
        return "use_cache=False: the loop always decodes with a key/value cache"
    if (known := FALLBACK.remembered(model)) is not None:
        return known
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return f"{name} is not a decoder-only Hugging Face model"
    parameters = inspect.signature(model.forward).parameters
    if not {"input_ids", "attention_mask", "position_ids", "past_key_values"} <= set(parameters):
        return f"{name}.forward takes no input_ids, attention_mask, position_ids and past_key_values"
    attention = attention_refusal(model, "which the loop's cache lacks")
    if attention is not None:
        return attention
    generation = getattr(model, "generation_config", None)
    extra = sorted(key for key, neutral in _NEUTRAL.items() if getattr(generation, key, None) not in neutral)
    if extra:
        settings = ", ".join(f"{k}={getattr(generation, k)!r}" for k in extra)
        return f"{name}'s generation config sets {settings}, which generate applies and the loop does not"
    return None


class BufferLayer(DynamicLayer):
    """One layer's keys and values in buffers ``[N, H, capacity, D]`` allocated at the first update and
    written in place; ``update`` returns views of the filled part, the same shape the dynamic cache's
    concatenation returns."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        n, h, _, d = key_states.shape
        self.key_buffer = key_states.new_empty(n, h, self.capacity, d)  # [N, H, capacity, D]
        self.value_buffer = value_states.new_empty(n, h, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"the decode cache holds {self.capacity} positions; a forward asked for {end}")
        self.key_buffer[:, :, self.length : end].copy_(key_states)
        self.value_buffer[:, :, self.length : end].copy_(value_states)
        self.length = end
        # [N, H, end, D] views
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def start_from(self, keys: Tensor, values: Tensor, length: int) -> None:
        """Take the buffers ``keys, values [N, H, capacity, D]``, their first ``length`` positions filled."""
        self.dtype, self.device = keys.dtype, keys.device
        self.key_buffer, self.value_buffer, self.length = keys, values, length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self.is_initialized = True

    def move_rows(self, holes: Tensor, fillers: Tensor, rows: int) -> None:
        """Copy the filled part of rows ``fillers`` into rows ``holes``, then keep the first ``rows`` rows
        (views of the same buffers: nothing is allocated, and only the moved rows are copied)."""
        if self.is_initialized:
            for buffer in (self.key_buffer, self.value_buffer):
                buffer[holes, :, : self.length] = buffer[fillers, :, : self.length]
            self.key_buffer, self.value_buffer = self.key_buffer[:rows], self.value_buffer[:rows]
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]


class BufferCache(Cache):
    """A cache of :class:`BufferLayer` s, one per layer, each with room for ``capacity`` positions."""

    def __init__(self, num_layers: int, capacity: int) -> None:
        super().__init__(layers=[BufferLayer(capacity) for _ in range(num_layers)])

    @classmethod
    def of(cls, model: nn.Module, capacity: int, prefix: DynamicCache | None = None) -> BufferCache:
        """A cache for ``model`` (as many layers as its dynamic cache), holding a copy of ``prefix`` when
        given."""
        cache = cls(len(DynamicCache(config=model.config).layers), capacity)
        if prefix is not None:
            for layer, given in zip(cache.layers, prefix.layers, strict=True):
                layer.update(given.keys, given.values)
        return cache

    def keep_rows(self, stay: Tensor) -> Tensor:
        """Keep the rows where ``stay [n]`` is true, by moving the last of them into the places of the others:
        only the rows that move are copied (a finished row among the first ``n'`` takes the place of an
        unfinished one after them). Returns the new order ``[n']``: the old index of each row kept."""
        rows = int(stay.sum())
        holes = (~stay[:rows]).nonzero().squeeze(1)  # [k] rows that leave, among the first n'
        fillers = rows + stay[rows:].nonzero().squeeze(1)  # [k] rows that stay, after the first n'
        for layer in self.layers:
            layer.move_rows(holes, fillers, rows)
        order = torch.arange(rows, device=stay.device)
        order[holes] = fillers
        return order


#: The attention the loop switches an ``sdpa`` model with grouped-query heads to while it decodes
GQA_SDPA = "lit_grpo_gqa_sdpa"


def gqa_sdpa_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                       attention_mask: Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **kwargs) -> tuple[Tensor, None]:
    """Transformers' ``sdpa`` attention, with each key/value head shared by its group of query heads inside
    SDPA (``enable_gqa``) where transformers repeats it into copies.

    Transformers shares the heads only without a mask (on a GPU its kernels need that), so on a CPU every
    step of a left-padded batch copied every layer's keys and values, ``num_key_value_groups`` times over
    (SmolLM2: 3 heads into 9). With a mask, on a CPU, this calls the same kernel (the CPU flash attention,
    which supports a mask and shared heads) on the same values: each head's products see the same rows of
    keys and values, laid out with the same row stride, so the outputs are the same bits (tested against
    ``generate``, which keeps the copies). Elsewhere (no mask, no grouped heads, another device, other
    options) it is transformers' own function.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    if attention_mask is None or groups == 1 or query.device.type != "cpu" \
            or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None \
            or kwargs.get("output_attentions", False):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                     dropout_p=dropout, scale=scaling, is_causal=False,
                                                     enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None  # as transformers': [N, T, heads, D]


if AttentionMaskInterface is not None:
    AttentionInterface.register(GQA_SDPA, gqa_sdpa_attention)
    AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)  # the masks of sdpa, the same tensors


@contextmanager
def shared_heads(model: nn.Module) -> Iterator[None]:
    """Inside the block, ``model`` attends with :func:`gqa_sdpa_attention` when it attends with ``sdpa`` and
    has grouped-query heads; its configuration is set back on leaving, whatever happens inside. The switch
    is the model's configuration, seen by any forward of the same model object meanwhile (the asynchronous
    producer generates with a copy of its own)."""
    config = getattr(model, "config", None)
    grouped = any(getattr(m, "num_key_value_groups", 1) > 1 for m in model.modules())
    sdpa = getattr(config, "_attn_implementation", None) == "sdpa"
    if AttentionMaskInterface is None or not sdpa or not grouped:
        yield
        return
    config._attn_implementation = GQA_SDPA
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


def filtered_scores(logits: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    """``generate``'s sampling processors on float32 scores ``[n, V]``, in its order and with its ops: divide
    by the temperature (unless 1), keep the ``top_k`` largest (unless 0), then the smallest set of largest
    scores whose probability reaches ``top_p`` (unless 1); filtered scores become -inf."""
    scores = logits if temperature == 1.0 else logits / temperature
    if top_k:
        k = min(top_k, scores.size(-1))
        scores = scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], -float("inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False)  # [n, V]
        remove = ordered.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        remove[..., -1:] = 0  # keep at least one token
        scores = scores.masked_fill(remove.scatter(1, order, remove), -float("inf"))
    return scores


def inverse_cdf(probs: Tensor) -> Tensor:
    """One token ``[n]`` per row of the probabilities ``probs [n, V]``, from one uniform number per row: the
    first token whose cumulative probability (summed in float64) exceeds the uniform times the row's sum.

    The same distribution as ``torch.multinomial(probs, 1)`` up to the float64 rounding of the sums (about
    1e-12 of a probability), from ``n`` random numbers where ``multinomial`` draws ``n x V`` (an
    exponential per entry and row, then the largest ``probs / exponential``). A token of probability 0 is
    never drawn: its cumulative sum does not rise above the one before it, and the scaled uniform stays
    below the row's sum.
    """
    cdf = probs.to(torch.float64).cumsum(dim=-1)  # [n, V]
    total = cdf[:, -1:]  # [n, 1]
    if not bool(torch.isfinite(total).all()):  # torch.multinomial's complaint, which the engine explains
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    target = torch.rand(total.shape, dtype=torch.float64, device=probs.device,
                        generator=stream_generator(probs.device)) * total  # [n, 1] in [0, total)
    # rounding cannot reach total
    target = torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


#: How :func:`next_tokens` draws from the filtered distribution: ``generate``'s ``torch.multinomial`` (the
#: same samples as ``generate`` from the same seed), or one uniform a row (:func:`inverse_cdf`; the same
#: distribution)
SAMPLERS = ("multinomial", "inverse_cdf")


def next_tokens(logits: Tensor, sampling: SamplingParams, sampler: str = "multinomial") -> Tensor:
    """The tokens ``[n]`` drawn from the last position's logits ``[n, V]`` by ``sampler`` (:data:`SAMPLERS`):
    greedy at temperature 0."""
    scores = logits.to(copy=True, dtype=torch.float32)  # [n, V]
    if sampling.temperature == 0:
        return torch.argmax(scores, dim=-1)
    scores = filtered_scores(scores, sampling.temperature, sampling.top_k, sampling.top_p)
    probs = nn.functional.softmax(scores, dim=-1)  # [n, V]
    if sampler == "inverse_cdf":
        return inverse_cdf(probs)
    return torch.multinomial(probs, num_samples=1, generator=stream_generator(probs.device)).squeeze(1)


_STREAM = threading.local()  # this thread's own random stream (:func:`own_stream`), if any


@contextmanager
def own_stream(seed: int) -> Iterator[None]:
    """Within the block, in this thread, :func:`next_tokens` draws from generators of its own (one per device,
    each seeded with ``seed``) instead of torch's global one, which every thread of the process shares: the
    samples then do not depend on what other threads draw meanwhile. On a CPU the stream is the one
    ``torch.manual_seed(seed)`` starts, so the samples are those of the global generator seeded so."""
    before = getattr(_STREAM, "seed", None), getattr(_STREAM, "generators", None)
    _STREAM.seed, _STREAM.generators = seed, {}
    try:
        yield
    finally:
        _STREAM.seed, _STREAM.generators = before


def stream_generator(device: torch.device) -> torch.Generator | None:
    """The generator of this thread's :func:`own_stream` on ``device`` (None outside one: torch's global
    one)."""
    generators = getattr(_STREAM, "generators", None)
    if generators is None:
        return None
    if device not in generators:
        generators[device] = torch.Generator(device=device).manual_seed(_STREAM.seed)
    return generators[device]


@dataclass
class Past:
    """Keys and values computed before a decode for each of its rows, ahead of the ids it starts from (the
    earlier turns of an episode): ``cache`` holds ``W`` positions a row, ``mask [N, W]`` marks those that hold
    one of the row's tokens, ``lengths [N]`` counts them (the position of the row's next token)."""

    cache: BufferCache
    mask: Tensor
    lengths: Tensor

    @classmethod
    def of(cls, held: list[Kept | None], room: int) -> Past | None:
        """The past of rows whose keys and values are ``held`` (None: a row with no past), each right-aligned
        in a buffer with ``room`` more positions for the decode; None when no row has one."""
        given = [h for h in held if h is not None]
        if not given:
            return None
        sizes = [0 if h is None else h[0][0].shape[1] for h in held]
        width = max(sizes)
        cache = BufferCache(len(given[0]), width + room)
        for k, layer in enumerate(cache.layers):
            parts = []
            for states in (0, 1):
                like = given[0][k][states]  # [H, L, D]
                buffer = like.new_zeros(len(held), like.shape[0], width + room, like.shape[2])  # [N, H, C, D]
                for row, h in enumerate(held):
                    if h is not None:
                        buffer[row, :, width - sizes[row] : width] = h[k][states]
                parts.append(buffer)
            layer.start_from(*parts, width)
        lengths = torch.tensor(sizes, device=given[0][0][0].device)  # [N]
        mask = torch.arange(width, device=lengths.device)[None] >= (width - lengths)[:, None]  # [N, W]
        return cls(cache, mask, lengths)


#: What :func:`decode` keeps of each row when asked: per layer, the keys and values ``[H, L, D]`` of the ``L``
#: tokens it computed them for (the past, the ids and the sampled tokens but the last), in the row's order
Kept = list[tuple[Tensor, Tensor]]


def decode(model: nn.Module, ids: Tensor, mask: Tensor, sampling: SamplingParams, eos_ids: list[int],
           pad_id: int, prefix: DynamicCache | None = None, shrink: bool = False,
           sampler: str = "multinomial", past: Past | None = None,
           keep: dict[int, Kept] | None = None) -> tuple[Tensor, Tensor]:
    """Sample up to ``sampling.max_new_tokens`` tokens after the left-padded prompts ``ids, mask [N, Tp]``.

    Returns ``(tokens [N, T], logprobs [N, T])``, ``T`` the steps run (as ``generate``: until every row
    emitted one of ``eos_ids`` or ``max_new_tokens``); a row's tokens after its EOS are ``pad_id``.
    ``prefix`` is the cache of every row's prompt but its last token
    (:func:`~lit_grpo.rollout.prefill.prompt_cache`); without it the first forward runs the whole prompts.
    With ``shrink``, finished rows leave the batch; ``sampler`` is how a step draws (:func:`next_tokens`).
    ``past`` (no ``prefix`` then) holds what each row attends to before its ids, whose positions follow it;
    ``keep`` receives each row's :data:`Kept` as the row leaves the batch or the loop ends (its tokens are its
    past's, its ids', and its sampled tokens' but the last, which no forward has read).
    Raises :class:`NotServed`, before drawing any random number, when the model ignores the cache it is
    given.
    """
    with shared_heads(model):
        return _sample(model, ids, mask, sampling, eos_ids, pad_id, prefix, shrink, sampler, past, keep)


def _sample(model: nn.Module, ids: Tensor, mask: Tensor, sampling: SamplingParams, eos_ids: list[int],
            pad_id: int, prefix: DynamicCache | None, shrink: bool, sampler: str, past: Past | None,
            keep: dict[int, Kept] | None) -> tuple[Tensor, Tensor]:
    """:func:`decode`'s loop."""
    n, tp = ids.shape
    steps = sampling.max_new_tokens
    tokens = ids.new_full((n, steps), pad_id)  # [N, T]
    logprobs = torch.zeros(n, steps, dtype=torch.float32, device=ids.device)  # [N, T]
    seen = mask.bool() if past is None else torch.cat([past.mask, mask.bool()], 1)  # [N, W + Tp]
    # generate drops an all-ones mask (no padding), which selects other attention kernels: do the same
    attention = None if bool(seen.all()) else \
        torch.cat([seen.long(), mask.new_ones(n, steps, dtype=torch.long)], 1)
    # [N, Tp], as generate: padding at position 0; after a past, its tokens come first
    start = 0 if past is None else past.lengths[:, None]
    positions = (mask.long().cumsum(-1) - 1 + start).masked_fill(~mask.bool(), 0)
    width = seen.shape[1]  # the positions before the first sampled token's
    cache = BufferCache.of(model, tp + steps, prefix) if past is None else past.cache
    first = 0 if prefix is None else tp - 1
    step_ids, step_positions = ids[:, first:], positions[:, first:]  # [N, Tp - first]
    eos = torch.as_tensor(eos_ids, dtype=torch.long, device=ids.device)  # [E]
    unfinished = torch.ones(n, dtype=torch.bool, device=ids.device)  # [n] of the rows in the batch
    rows = torch.arange(n, device=ids.device)  # [n] the original row of each row in the batch
    ended = torch.full((n,), steps, device=ids.device)  # [N] the step at which each row sampled its EOS
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters \
        else {}
    for t in range(steps):
        seen_now = None if attention is None else attention[:, : width + t]
        out = model(input_ids=step_ids, attention_mask=seen_now,
                    position_ids=step_positions, past_key_values=cache, use_cache=True, return_dict=True,
                    **last_only)
        if t == 0 and (out.past_key_values is not cache or cache.get_seq_length() != width):
            raise NotServed(f"{type(model).__name__}'s forward returns {type(out.past_key_values).__name__}, "
                            "not the cache it was given")
        logits = out.logits[:, -1]  # [n, V]
        sampled = next_tokens(logits, sampling, sampler)  # [n]
        if eos.numel():  # as generate: rows that are done get pad tokens (with shrink, none is in the batch)
            sampled = sampled.masked_fill(~unfinished, pad_id)
            ended[rows] = torch.where(unfinished & torch.isin(sampled, eos), t, ended[rows])
            unfinished = unfinished & ~torch.isin(sampled, eos)
        tokens[rows, t] = sampled
        logprobs[rows, t] = token_logprobs(logits, sampled, sampling.temperature or 1.0)
        if t + 1 == steps or not bool(unfinished.any()):
            if keep is not None:
                here = torch.arange(len(rows), device=rows.device)
                _keep(keep, cache, seen, attention, width, rows, ended[rows].clamp(max=t), here)
            return tokens[:, : t + 1], logprobs[:, : t + 1]
        step_ids, step_positions = sampled[:, None], step_positions[:, -1:] + 1  # [n, 1]
        if shrink and not bool(unfinished.all()):
            if keep is not None:
                leaving = (~unfinished).nonzero().squeeze(1)
                _keep(keep, cache, seen, attention, width, rows[leaving], ended[rows[leaving]], leaving)
            stay = cache.keep_rows(unfinished)  # [n'] the rows that go on, in their new order
            rows, unfinished, step_ids, step_positions = rows[stay], unfinished[stay], step_ids[stay], \
                step_positions[stay]
            attention = None if attention is None else attention[stay]
    return tokens, logprobs  # max_new_tokens=0: [N, 0]


def _keep(keep: dict[int, Kept], cache: BufferCache, seen: Tensor, attention: Tensor | None, width: int,
          rows: Tensor, ended: Tensor, local: Tensor) -> None:
    """Copies into ``keep`` the keys and values of the original rows ``rows [k]``, in the batch at ``local
    [k]``, each of which sampled its last token at step ``ended [k]``: its positions among the first ``width``
    that hold a token (``seen``), then the ``ended`` decode steps' after them (step ``s`` writes the token of
    step ``s - 1``). ``attention`` is the mask of the rows in the batch (None: every position holds one)."""
    for row, step, at in zip(rows.tolist(), ended.tolist(), local.tolist(), strict=True):
        held = seen[row] if attention is None else attention[at, :width].bool()  # [W + Tp]
        slots = torch.cat([held.nonzero().squeeze(1),
                           torch.arange(width, width + step, device=held.device)])  # [L]
        keep[row] = [(layer.key_buffer[at, :, slots], layer.value_buffer[at, :, slots])
                     for layer in cache.layers]
