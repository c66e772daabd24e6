"""Loading a causal LM and its tokenizer from a hub id or a local directory, with errors that name the fix.

``load_tokenizer`` and ``load_policy`` are the only entry points the rest of the package uses (the module,
the prompt templates, the benchmarks); transformers is imported inside them, so importing this module is
cheap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from lit_grpo.models.files import check_model_files, check_tokenizer_files, damaged, local_dir
from lit_grpo.models.sources import resolve_model
from lit_grpo.precision import resolve_dtype

DType = Literal["float32", "bfloat16", "float16", "auto"]  # auto: lit_grpo.precision


def looks_local(name: str) -> bool:
    """A path rather than a hub id (``org/name``)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.path.exists(name)


def load_tokenizer(model: str):
    """The tokenizer of a hub id or local directory, with a clear error when it cannot be found."""
    from transformers import AutoTokenizer

    model = resolve_model(model)  # a packaged model or a .gguf file: its converted directory
    _check_model_path(model)
    check_tokenizer_files(model)
    with _loading(model, "tokenizer"):
        return AutoTokenizer.from_pretrained(model)


def load_policy(model: str, dtype: DType = "float32", from_scratch: bool = False, seed: int = 0) -> nn.Module:
    """A causal LM from a hub id or local directory; ``from_scratch`` initialises its config randomly."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = resolve_model(model)  # a packaged model or a .gguf file: its converted directory
    _check_model_path(model)
    check_model_files(model, weights=not from_scratch)
    torch_dtype = getattr(torch, resolve_dtype(dtype).dtype)
    with _loading(model, "model"):
        if from_scratch:
            torch.manual_seed(seed)
            config = AutoConfig.from_pretrained(model)
            return AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        return AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)


@contextmanager
def _loading(model: str, what: str) -> Iterator[None]:
    """Turns a failure to load ``what`` (model or tokenizer) into the error that names the fix."""
    try:
        yield
    except Exception as err:
        if local_dir(model) is not None:  # a directory with the files: one of them is damaged
            raise damaged(model, what, err) from err
        if isinstance(err, OSError):
            raise OSError(_not_found_message(model)) from err
        raise


def _check_model_path(model: str) -> None:
    if looks_local(model) and not Path(model).expanduser().is_dir():
        raise FileNotFoundError(
            f"model={model!r}: no such directory. Give a local directory saved with save_pretrained() "
            "or a Hugging Face hub id (available offline in the hub cache)."
        )


def _not_found_message(model: str) -> str:
    return (
        f"model={model!r} could not be loaded: it is neither a local model directory nor a hub id present in "
        "the local cache (HF_HUB_OFFLINE may be set). Download it first or point model to a local directory."
    )
