"""The shipped files: what the wheel is told to hold, built-in config names, the path rule, `lit-grpo configs`.

scripts/check_wheel.sh (run by .ci/run) builds and installs the wheel itself and runs the quickstart from it."""

import subprocess
import sys
from pathlib import Path

import pytest

import lit_grpo
from lit_grpo import resources
from lit_grpo.commands import main
from lit_grpo.lab.loader import load_experiment

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_wheel_is_told_to_ship_every_package_and_no_other_top_level_name():
    setuptools = _pyproject()["tool"]["setuptools"]
    packages = set(setuptools["packages"])
    code = {"lit_grpo"} | {
        "lit_grpo." + p.parent.relative_to(ROOT / "lit_grpo").as_posix().replace("/", ".")
        for p in (ROOT / "lit_grpo").rglob("__init__.py") if p.parent != ROOT / "lit_grpo"
    }
    data = {
        f"lit_grpo._data.{folder}" + ("." + p.relative_to(ROOT / folder).as_posix().replace("/", ".") if p != ROOT / folder else "")
        for folder in ("configs", "experiments") for p in [ROOT / folder, *(ROOT / folder).rglob("*")] if p.is_dir()
    } | {"lit_grpo._data.assets"}
    assert packages == code | data
    assert {name.split(".")[0] for name in packages} == {"lit_grpo"}  # no top-level callbacks
    assert setuptools["package-dir"] == {
        "lit_grpo._data.configs": "configs", "lit_grpo._data.experiments": "experiments", "lit_grpo._data.assets": "assets"
    }
    assert set(setuptools["package-data"]["lit_grpo._data.assets"]) == {
        f"{p.name}/*" for p in (ROOT / "assets").iterdir() if p.is_dir()
    }


def test_the_version_has_one_source():
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lit_grpo.version.__version__"}
    assert f"## {lit_grpo.__version__} " in (ROOT / "CHANGELOG.md").read_text()


def test_version_command(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"lit-grpo {lit_grpo.__version__} (python ")


def test_in_a_clone_the_shipped_files_are_the_repository_folders():
    assert resources.root() == ROOT
    assert resources.asset("tiny-arith-sft") == ROOT / "assets" / "tiny-arith-sft"


@pytest.mark.parametrize(("name", "kind", "path"), [
    ("quickstart", "configs", "configs/quickstart.yaml"),
    ("quickstart.yaml", "configs", "configs/quickstart.yaml"),
    ("estimators/sign", "configs", "configs/estimators/sign.yaml"),
    ("real/quickstart", "configs", "configs/real/quickstart.yaml"),
    ("configs/quickstart.yaml", "configs", "configs/quickstart.yaml"),  # the repository path, as in the headers
    ("experiments/prepare/sft_tiny_strong", "configs", "experiments/prepare/sft_tiny_strong.yaml"),
    ("passk_crossing", "experiments", "experiments/passk_crossing.yaml"),
    ("experiments/passk_crossing.yaml", "experiments", "experiments/passk_crossing.yaml"),
])
def test_builtin_names_resolve_from_any_directory(tmp_path, monkeypatch, name, kind, path):
    monkeypatch.chdir(tmp_path)
    assert resources.resolve(name, kind) == str(ROOT / path)


@pytest.mark.parametrize(("name", "kind"), [("passk_crossing", "configs"), ("quickstart", "experiments"), ("../README.md", "configs"),
                                            ("/etc/hostname", "configs"), ("configs", "configs")])
def test_other_names_are_not_builtin(tmp_path, monkeypatch, name, kind):
    monkeypatch.chdir(tmp_path)
    assert resources.find(name, kind) is None


def test_a_file_wins_over_a_builtin_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text("seed_everything: 1\n")
    assert resources.resolve("quickstart") == "quickstart"


def test_an_unknown_name_fails_naming_close_builtin_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(resources.ConfigNotFoundError, match=r"'quickstrat'.*Did you mean quickstart.*configs list"):
        resources.resolve("quickstrat")


def test_list_names_every_shipped_config_and_experiment(capsys):
    assert main_status(["configs", "list"]) == 0
    out = capsys.readouterr().out
    shipped = [p.relative_to(ROOT / "configs").with_suffix("").as_posix() for p in (ROOT / "configs").rglob("*.yaml")]
    shipped += [p.stem for p in (ROOT / "experiments").glob("*.yaml")]
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert set(shipped) <= listed
    assert "experiments/prepare/sft_tiny_strong" in listed
    assert "  quickstart " in out and "2 CPU cores, no GPU, offline" in out


def test_show_prints_a_builtin_config(capsys):
    assert main_status(["configs", "show", "estimators/sign"]) == 0
    assert capsys.readouterr().out == (ROOT / "configs" / "estimators" / "sign.yaml").read_text()


def test_copy_writes_an_editable_file_and_never_overwrites_silently(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main_status(["configs", "copy", "quickstart", "my.yaml"]) == 0
    assert (tmp_path / "my.yaml").read_text() == (ROOT / "configs" / "quickstart.yaml").read_text()
    assert "lit-grpo fit --config my.yaml" in capsys.readouterr().out
    (tmp_path / "my.yaml").write_text("edited\n")
    assert main_status(["configs", "copy", "quickstart", "my.yaml"]) == 1
    assert "exists" in capsys.readouterr().err and (tmp_path / "my.yaml").read_text() == "edited\n"
    assert main_status(["configs", "copy", "quickstart", "my.yaml", "--force"]) == 0
    (tmp_path / "mine").mkdir()
    assert main_status(["configs", "copy", "passk_crossing", "mine"]) == 0  # an experiment, into a folder
    assert (tmp_path / "mine" / "passk_crossing.yaml").is_file()
    assert "lit-grpo compare --config mine/passk_crossing.yaml" in capsys.readouterr().out
    assert main_status(["configs", "copy", "nope", "x.yaml"]) == 2
    assert "no built-in config or experiment" in capsys.readouterr().err


def test_a_name_of_both_kinds_must_say_which(tmp_path, monkeypatch, capsys):
    for kind in ("configs", "experiments"):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "same.yaml").write_text(f"# {kind}\n")
    monkeypatch.setattr(resources, "root", lambda: tmp_path)
    assert main_status(["configs", "show", "same"]) == 2
    assert "write configs/same or experiments/same" in capsys.readouterr().err
    assert main_status(["configs", "show", "experiments/same"]) == 0
    assert capsys.readouterr().out == "# experiments\n"


def main_status(argv: list[str]) -> int:
    return main(argv)


# ---- the path rule of experiments ------------------------------------------------------------------------------
def test_a_builtin_experiment_reads_builtin_configs_whatever_lies_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "quickstart.yaml").write_text("not: the built-in quickstart\n")  # a decoy
    exp = load_experiment("sign_vs_drgrpo", quick=True)
    assert exp.path == "sign_vs_drgrpo"
    assert exp.base == (str(ROOT / "configs" / "quickstart.yaml"),)
    assert exp.arms[0].configs == (str(ROOT / "configs" / "estimators" / "sign.yaml"),)
    command = exp.prepare[0].command
    assert command[command.index("--config") + 1] == str(ROOT / "experiments" / "prepare" / "sft_tiny_strong.yaml")


def test_from_the_repository_root_a_builtin_experiment_keeps_its_spelling(monkeypatch):
    monkeypatch.chdir(ROOT)
    exp = load_experiment("experiments/sign_vs_drgrpo.yaml", quick=True)
    assert exp.base == ("configs/quickstart.yaml",)
    assert "experiments/prepare/sft_tiny_strong.yaml" in exp.prepare[0].command


def test_a_users_experiment_reads_the_working_directory_then_its_folder_then_builtin_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "beside.yaml").write_text("model:\n  init_args: {lr: 1.0e-4}\n")
    (tmp_path / "here.yaml").write_text("model:\n  init_args: {lr: 1.0e-4}\n")
    (folder / "exp.yaml").write_text(
        "name: mine\nbase: [configs/quickstart.yaml]\nseeds: [0]\nmetrics: [rollout/reward_mean]\n"
        "arms:\n  a: {config: [beside.yaml]}\n  b: {config: [here.yaml]}\n  c: {config: [estimators/sign]}\n"
    )
    exp = load_experiment(folder / "exp.yaml")
    assert exp.base == (str(ROOT / "configs" / "quickstart.yaml"),)  # no such file here: the built-in config
    assert [arm.configs for arm in exp.arms] == [
        (str(folder / "beside.yaml"),), ("here.yaml",), (str(ROOT / "configs" / "estimators" / "sign.yaml"),)
    ]
    (folder / "exp.yaml").write_text((folder / "exp.yaml").read_text().replace("beside.yaml", "absent.yaml"))
    with pytest.raises(ValueError, match=r"config file 'absent.yaml' does not exist .*no built-in config"):
        load_experiment(folder / "exp.yaml")


def test_an_unknown_experiment_name_fails_naming_close_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"'passk_crosing'.*Did you mean passk_crossing"):
        load_experiment("passk_crosing")


def test_the_console_command_answers_version_and_configs_without_loading_the_trainer():
    # import lit_grpo loads torch and Lightning (its exports are imported by name); the commands add nothing to
    # that but their own modules: neither LightningCLI (lit_grpo.cli, lightning.pytorch.cli) nor anything else
    code = (
        "import sys\n"
        "import lit_grpo\n"
        "before = set(sys.modules)\n"
        "from lit_grpo.__main__ import main\n"
        "for argv in (['--version'], ['configs', 'list']):\n"
        "    assert main(argv) == 0\n"
        "print(sorted(m for m in set(sys.modules) - before if not m.startswith(('lit_grpo.commands', "
        "'lit_grpo.__main__'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"lit-grpo {lit_grpo.__version__} (python ")
    assert "  quickstart " in done.stdout and done.stdout.strip().endswith("[]")
