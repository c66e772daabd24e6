"""Each distinct prompt prefilled once for ``generate``: a key/value cache of the prompts, expanded to
the rows that sample from them.

The ``n`` rows of a group repeat one prompt, so the plain path computes every prompt ``n`` times. Here the
distinct prompts run once over all but their last token into a :class:`~transformers.DynamicCache`, which is
then indexed to one row per sample. Given that cache and the full prompt ids and mask, ``generate`` runs only
each row's last prompt token and the new tokens, with the position ids and attention mask it uses without a
cache.
"""

from __future__ import annotations

import inspect
import logging

from torch import Tensor, nn

from lit_grpo.perf import Fallback, attention_refusal

FALLBACK = Fallback(logging.getLogger(__name__),
                    "shared_prefill: each row prefills its own prompt (the plain path): %s")


def prompt_cache(model: nn.Module, ids: Tensor, mask: Tensor, rows: Tensor, use_cache: bool = True):
    """A cache of the prompts ``ids [U, Tp]`` (left padded, ``mask [U, Tp]``) over all but their last token,
    expanded to ``rows [N]`` (the prompt of each row to generate), for
    ``model.generate(input_ids=ids[rows], attention_mask=mask[rows], past_key_values=cache)``.

    ``model`` is the Hugging Face model ``generate`` runs (not a peft wrapper). Returns None, and the plain
    path applies, where this cannot be exact (with one log message per reason): ``use_cache=False``, a
    generation config that names its own cache, a model without the default dynamic cache, attention other
    than full on every layer, or a forward that does not fill the plain dynamic cache it is given; and
    silently where no prompt repeats or the prompts are one token long.
    """
    if len(ids) == len(rows) or ids.shape[1] < 2:
        return None
    reason = _refusal(model, use_cache)
    cache = None
    if reason is None:
        cache, reason = _prefill(model, ids, mask)
        if reason is not None:
            FALLBACK.remember(model, reason)
    if reason is not None:
        FALLBACK.say(reason)
        return None
    cache.batch_select_indices(rows)
    return cache


def _refusal(model: nn.Module, use_cache: bool) -> str | None:
    """Why ``model`` cannot generate from a shared prompt cache (None when it can)."""
    if not use_cache:
        return "use_cache=False: generate keeps no cache to start from"
    if (known := FALLBACK.remembered(model)) is not None:
        return known
    name = type(model).__name__
    implementation = getattr(getattr(model, "generation_config", None), "cache_implementation", None)
    if implementation is not None:
        return f"{name}'s generation config sets cache_implementation={implementation!r}, which generate " \
               "refuses together with a given cache"
    supports = getattr(model, "_supports_default_dynamic_cache", None)
    if supports is None or not supports():
        return f"{name} does not generate with the default dynamic cache"
    return attention_refusal(model, "whose cache is not the prompt's whole keys and values")


def _prefill(model: nn.Module, ids: Tensor, mask: Tensor):
    """``(cache, None)``: the forward of ``ids[:, :-1]`` into a fresh dynamic cache, with the position ids
    ``generate`` derives from the left-padded mask; ``(None, reason)`` when the forward does not fill it."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    mask = mask.long()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate: padding at position 0
    cache = DynamicCache(config=model.config)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    out = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                past_key_values=cache, use_cache=True, **keep)
    filled = getattr(out, "past_key_values", None)
    layers = getattr(filled, "layers", None)
    if filled is not cache or not layers or any(type(layer) is not DynamicLayer for layer in layers) \
            or cache.get_seq_length() != ids.shape[1] - 1:
        return None, (f"{type(model).__name__}'s forward returns {type(filled).__name__}, not the dynamic "
                      "cache of full attention layers it was given")
    return cache, None

