"""What is missing or damaged in a local model directory, named before (or instead of) a loader's error.

Hugging Face loaders report a directory without weights as "not a hub id" and a truncated safetensors
file as a bare header error without its path; these checks name the directory, the file and the fix.
"""

from __future__ import annotations

from pathlib import Path

#: Files that hold a causal LM's weights (one of them, or a peft adapter, must be present).
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "adapter_model.safetensors", "adapter_model.bin")
#: Files from which a tokenizer loads (one of them must be present).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")
_SAVE = "Point model to a directory written by save_pretrained() (config, weights and tokenizer)"


def local_dir(model: str) -> Path | None:
    """``model`` as a local directory, or None (a hub id, or a path that is not a directory)."""
    path = Path(model).expanduser()
    return path if path.is_dir() else None


def check_model_files(model: str, weights: bool = True) -> None:
    """Raises ``FileNotFoundError`` naming the directory and what it lacks: ``config.json``, or (with
    ``weights``) every weights file. Does nothing for a hub id."""
    path = local_dir(model)
    if path is None:
        return
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(
            f"model={model!r}: the directory {path} has no config.json{_holding(path)}. {_SAVE}."
        )
    if weights and not any((path / name).is_file() for name in WEIGHT_FILES):
        raise FileNotFoundError(
            f"model={model!r}: the directory {path} has a config.json but no weights (none of "
            f"{', '.join(WEIGHT_FILES)}){_holding(path)}. {_SAVE}; a copy or download may have stopped early."
        )


def check_tokenizer_files(model: str) -> None:
    """Raises ``FileNotFoundError`` naming the directory when it holds no tokenizer file."""
    path = local_dir(model)
    if path is not None and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"model={model!r}: the directory {path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)})"
            f"{_holding(path)}. Save the tokenizer there too (tokenizer.save_pretrained(path))."
        )


def damaged(model: str, what: str, err: BaseException) -> OSError:
    """The error for a local directory whose ``what`` ("model", "tokenizer") failed to load with ``err``:
    names the damaged safetensors file when one is found, else the directory and ``err``."""
    path = local_dir(model)
    for file in sorted(path.glob("*.safetensors")) if path is not None else []:
        problem = _safetensors_problem(file)
        if problem:
            return OSError(
                f"model={model!r}: {file} is damaged ({problem}); it was probably truncated by an "
                "interrupted copy or download. Copy, download or save the model again."
            )
    return OSError(
        f"model={model!r}: loading the {what} from {path} failed: {type(err).__name__}: {err}. A file in the "
        f"directory is damaged or does not match the others{_holding(path)}; copy, download or save it again."
    )


def _safetensors_problem(file: Path) -> str | None:
    from safetensors import safe_open

    try:
        with safe_open(str(file), "pt") as f:
            f.keys()
    except Exception as err:  # SafetensorError, OSError
        return str(err)
    return None


def _holding(path: Path | None) -> str:
    if path is None:
        return ""
    names = sorted(p.name for p in path.iterdir())
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return f" (it holds: {shown})" if names else " (it is empty)"
