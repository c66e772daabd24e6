"""Tiny character-level causal LMs built in code, for offline runs and tests.

Nothing can be downloaded in tests or on an offline machine, so the quickstart and the test suite use a
Qwen2-architecture model with a character-level tokenizer that the project builds itself and saves with
the normal ``save_pretrained`` calls. The loading code is the same as for any hub model.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase, Qwen2Config, Qwen2Tokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from lit_grpo.checks import require

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"}

#: Named sizes: (hidden, intermediate, layers, heads, kv heads).
SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "tiny": (128, 384, 3, 4, 2),  # ~0.6M parameters
    "small": (256, 768, 4, 4, 2),  # ~3M
    "medium": (512, 1536, 6, 8, 4),  # ~20M
    "large": (768, 2304, 14, 12, 4),  # ~100M
}


def char_tokenizer() -> Qwen2Tokenizer:
    """A character-level tokenizer over ``string.printable`` plus pad/bos/eos/unk (104 ids).

    It is Qwen2's byte-level BPE with no merges, so every printable character is one token and the
    saved tokenizer loads back through ``AutoTokenizer`` (and in vLLM) as the same Qwen2 tokenizer.
    """
    byte_to_char = bytes_to_unicode()
    symbols = list(SPECIAL_TOKENS.values()) + [byte_to_char[ord(c)] for c in string.printable]
    vocab = {tok: i for i, tok in enumerate(symbols)}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], **SPECIAL_TOKENS)
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_config(
    tokenizer: PreTrainedTokenizerBase, size: str = "tiny", max_positions: int = 256
) -> Qwen2Config:
    require(size in SIZES, f"size={size!r} is not a known tiny-model size; choose one of {sorted(SIZES)}")
    hidden, ffn, layers, heads, kv_heads = SIZES[size]
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def build_tiny_model(path: str | Path, size: str = "tiny", seed: int = 0, max_positions: int = 256) -> Path:
    """Create a randomly initialised tiny causal LM and its tokenizer at ``path``; returns the path.
    ``max_positions``: its context in tokens (characters), prompt and completion together."""
    path = Path(path)
    tokenizer = char_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(tokenizer, size, max_positions))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
