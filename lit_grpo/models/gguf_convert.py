"""GGUF files to standard Hugging Face model directories: read, dequantise, save, check.

transformers reads a GGUF file with ``from_pretrained(dir, gguf_file=...)`` and dequantises its tensors,
but the model it returns is flagged as quantised and ``save_pretrained`` refuses it. :func:`convert_gguf`
copies the dequantised weights into a model built from the same config without ``quantization_config``
(tied embeddings stay tied), saves it with the tokenizer and its chat template, reloads the result and
checks it against the GGUF-loaded model. Every failure is a :class:`ModelSourceError` that names the file,
the problem and the fix.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


class ModelSourceError(RuntimeError):
    """A model source that cannot become a local model directory; the message says why and what to do."""


def gguf_architecture(path: Path) -> str:
    """The ``general.architecture`` of a GGUF file; reads the header and the tensor index only.

    Raises :class:`ModelSourceError` when the file is missing, is not a GGUF file, or is truncated or
    corrupt (its tensor data would run past the end of the file).
    """
    try:
        from gguf import GGUFReader
    except ImportError as err:
        raise ModelSourceError(
            "reading GGUF files needs the `gguf` package: pip install gguf (it is a dependency of lit-grpo; "
            "reinstall with scripts/install.sh)"
        ) from err
    if not path.is_file():
        raise ModelSourceError(f"GGUF file {str(path)!r} does not exist; give the path of a .gguf file")
    try:
        reader = GGUFReader(str(path))
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode()
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as err:  # the reader raises ValueError, KeyError, IndexError... on bad bytes
        raise ModelSourceError(
            f"{str(path)!r} is not a readable GGUF file ({type(err).__name__}: {err}); it is corrupt, "
            "truncated or not a GGUF file at all: delete it and download or copy it again"
        ) from None
    size = path.stat().st_size
    if end > size:
        raise ModelSourceError(
            f"{str(path)!r} is truncated: its tensors need {end} bytes but the file has {size}; delete it "
            "and download or copy it again"
        )
    return architecture


#: The special tokens a GGUF file names (``tokenizer.ggml.<key>``) and the tokenizer attribute each sets.
GGUF_SPECIAL_TOKENS = {
    "bos_token_id": "bos_token",
    "eos_token_id": "eos_token",
    "padding_token_id": "pad_token",
    "unknown_token_id": "unk_token",
}


def gguf_special_tokens(path: Path) -> dict[str, int]:
    """The special token ids the GGUF file's tokenizer metadata names, by tokenizer attribute
    (``eos_token``...)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    found = {}
    for key, attribute in GGUF_SPECIAL_TOKENS.items():
        field = fields.get(f"tokenizer.ggml.{key}")
        if field is not None and field.data:
            found[attribute] = int(field.parts[field.data[0]][0])
    return found


def use_special_tokens(tokenizer, ids: dict[str, int]) -> None:
    """Set the tokenizer's special tokens to the ids the GGUF file names (``gguf_special_tokens``): some
    transformers versions read them wrongly from GGUF (5.17 takes BOS for EOS and leaves no pad token)."""
    for attribute, token_id in ids.items():
        if 0 <= token_id < len(tokenizer):
            setattr(tokenizer, attribute, tokenizer.convert_ids_to_tokens(token_id))


def check_supported(path: Path, architecture: str) -> None:
    """Fails unless transformers can read ``architecture`` from GGUF."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    supported = sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))
    if architecture.replace("-", "_") not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelSourceError(
            f"{str(path)!r} holds a {architecture!r} model, which this transformers version cannot read from "
            f"GGUF (it reads {', '.join(supported)}); convert the original checkpoint with save_pretrained "
            "instead and give its directory as the model"
        )


def convert_gguf(path: Path, out: Path, expected_parameters: int | None = None) -> dict:
    """Converts the GGUF file ``path`` into a Hugging Face directory ``out`` (which must not exist yet).

    Writes ``model.safetensors`` (float32), ``config.json``, ``generation_config.json``, the tokenizer
    and its chat template, then reloads ``out`` and checks it (:func:`check_converted`). Returns what the
    check found (parameter count, architecture, EOS token, whether there is a chat template).
    """
    architecture = gguf_architecture(path)
    check_supported(path, architecture)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        use_special_tokens(tokenizer, gguf_special_tokens(path))
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as err:
        raise ModelSourceError(
            f"transformers could not load {str(path)!r} as a causal LM ({type(err).__name__}: {err}); the "
            "file may be damaged (download it again) or of a kind transformers does not convert"
        ) from err
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    settings.pop("_name_or_path", None)
    config = AutoConfig.for_model(**settings)
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = loaded.state_dict()
    plain.load_state_dict(state, strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    out.mkdir(parents=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return check_converted(out, state, expected_parameters)


def check_converted(out: Path, state: dict[str, torch.Tensor], expected_parameters: int | None) -> dict:
    """Reloads ``out`` and checks it: the same tensors as ``state``, the expected parameter count, finite
    logits on a chat-rendered prompt, a tokenizer with EOS and pad tokens that round-trips its text."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(out)
    reloaded = model.state_dict()
    different = [k for k, v in state.items() if k not in reloaded or not torch.equal(v, reloaded[k])]
    problems = [f"tensors differ after saving: {different[:3]}"] if different else []
    parameters = sum(p.numel() for p in model.parameters())
    if expected_parameters is not None and parameters != expected_parameters:
        problems.append(f"{parameters} parameters, expected {expected_parameters}")
    if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
        problems.append(f"the tokenizer has no EOS or pad token (eos={tokenizer.eos_token!r}, "
                        f"pad={tokenizer.pad_token!r})")
    text = "What is 2 + 3?"
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if tokenizer.decode(ids[0]) != text:
        problems.append("the tokenizer does not decode its own encoding back to the text")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    if not torch.isfinite(logits).all():
        problems.append("non-finite logits on a short prompt")
    if problems:
        raise ModelSourceError(f"the converted model in {str(out)!r} failed its check: {'; '.join(problems)}")
    return {
        "architecture": model.config.model_type,
        "parameters": parameters,
        "eos_token": tokenizer.eos_token,
        "chat_template": bool(tokenizer.chat_template),
    }
