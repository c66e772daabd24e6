"""scripts/check_preregistration.py: a criterion counts as pre-registered only when the history shows it committed
before the experiment's data and unchanged since; docs/results.md labels exactly the experiments that fail."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_preregistration.py"
spec = importlib.util.spec_from_file_location("check_preregistration", SCRIPT)
check_preregistration = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = check_preregistration  # its dataclass looks its module up
spec.loader.exec_module(check_preregistration)

CRITERION = "# SUCCESS CRITERION (fixed before running): A - B >= 0.05\n# with Holm p < 0.05.\n"
TABLE = "| experiment | status |\n|---|---|\n| `exp` | measured{label} |\n"


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.git("init", "-q")
        self.git("config", "user.email", "a@b.c")
        self.git("config", "user.name", "a")

    def git(self, *args: str) -> None:
        subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True)

    def write(self, relative: str, text: str) -> None:
        (self.path / relative).parent.mkdir(parents=True, exist_ok=True)
        (self.path / relative).write_text(text)

    def commit(self, *files: tuple[str, str]) -> None:
        for relative, text in files:
            self.write(relative, text)
            self.git("add", relative)
        self.git("commit", "-q", "-m", "x")


def _exp(criterion: str) -> tuple[str, str]:
    return "experiments/exp.yaml", f"# exp: a claim\n{criterion}#\n# Result: pending\nname: exp\n"


DATA = ("docs/results/exp/runs.csv", "arm,seed\nA,0\n")


def _docs(label: bool) -> tuple[str, str]:
    return "docs/results.md", TABLE.format(label="; criteria written after the data" if label else "")


def test_a_criterion_committed_before_the_data_passes(tmp_path):
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(False))
    repo.commit(DATA)
    repo.commit(("experiments/exp.yaml", _exp(CRITERION)[1].replace("# Result: pending", "# Result: met")))
    assert check_preregistration.check(tmp_path, "exp").before_data  # a result line added later is not the block
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0


@pytest.mark.parametrize("how", ["same commit", "changed after"])
def test_a_criterion_written_with_or_after_the_data_must_be_labelled(tmp_path, capsys, how):
    repo = Repo(tmp_path)
    if how == "same commit":
        repo.commit(_exp(CRITERION), DATA, _docs(False))
    else:
        repo.commit(_exp(CRITERION), _docs(False))
        repo.commit(DATA)
        repo.commit(_exp(CRITERION.replace(">= 0.05", ">= 0.02")))  # moved after the data: not pre-registered
    assert not check_preregistration.check(tmp_path, "exp").before_data
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "the history says ['exp']" in capsys.readouterr().err
    repo.commit(_docs(True))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0
    assert "exp: criteria written after the data" in capsys.readouterr().out


def test_a_label_the_history_does_not_support_fails(tmp_path):
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(True))
    repo.commit(DATA)
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1


def test_the_published_experiments_are_labelled_as_their_history_says():
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() == "true":
        pytest.skip("needs the repository's whole git history (not a shallow clone, not an unpacked wheel)")
    assert check_preregistration.main(["--repo", str(ROOT)]) == 0
