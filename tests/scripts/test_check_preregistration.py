"""scripts/check_preregistration.py: a criterion counts as pre-registered only when the history shows the whole of it
committed before the data and unchanged since (amendments marked and additive only), across renames; the docs label
exactly the records that fail, and no doc claims a criterion came first without a record."""

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
    assert "exp: " in capsys.readouterr().err
    repo.commit(_docs(True))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0
    assert "exp: criteria written after the data" in capsys.readouterr().out


def test_a_label_the_history_does_not_support_fails(tmp_path):
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(True))
    repo.commit(DATA)
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1


def _whole_history() -> None:
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() == "true":
        pytest.skip("needs the repository's whole git history (not a shallow clone, not an unpacked wheel)")


def test_the_published_experiments_are_labelled_as_their_history_says():
    _whole_history()
    assert check_preregistration.main(["--repo", str(ROOT)]) == 0


TWO_PARAGRAPHS = CRITERION + "#\n# A difference below 0.05 is inconclusive.\n"


def test_a_later_paragraph_of_the_criterion_changed_after_the_data_fails(tmp_path):
    """The whole block counts, not its first paragraph."""
    repo = Repo(tmp_path)
    repo.commit(_exp(TWO_PARAGRAPHS), _docs(False))
    repo.commit(DATA)
    assert check_preregistration.check(tmp_path, "exp").before_data
    repo.commit(_exp(TWO_PARAGRAPHS.replace("inconclusive", "evidence of equality")))
    verdict = check_preregistration.check(tmp_path, "exp")
    assert not verdict.before_data and "AMENDMENT" in verdict.why
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1


def test_an_amendment_may_add_to_a_criterion_after_the_data_but_not_reword_it(tmp_path):
    repo = Repo(tmp_path)
    repo.commit(_exp(TWO_PARAGRAPHS), _docs(False))
    repo.commit(DATA)
    amended = TWO_PARAGRAPHS + "#\n# AMENDMENT (after the data): the greedy accuracy is also reported.\n"
    repo.commit(_exp(amended))
    assert check_preregistration.check(tmp_path, "exp").before_data
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0
    reworded = amended.replace(">= 0.05", ">= 0.02")  # the amendment does not cover a changed margin
    repo.commit(_exp(reworded))
    assert not check_preregistration.check(tmp_path, "exp").before_data
    unmarked = TWO_PARAGRAPHS + "#\n# Also: the greedy accuracy is reported.\n"
    repo.commit(_exp(unmarked))
    assert not check_preregistration.check(tmp_path, "exp").before_data


def test_renames_are_followed(tmp_path):
    """A criterion committed under another file name before the data still counts; one edited while the file is
    renamed after the data does not."""
    repo = Repo(tmp_path)
    repo.commit(("experiments/old.yaml", _exp(CRITERION)[1]), _docs(False))
    repo.git("mv", "experiments/old.yaml", "experiments/exp.yaml")
    repo.commit(DATA)  # the rename and the data in one commit: the criterion was there before, as old.yaml
    assert check_preregistration.check(tmp_path, "exp").before_data
    repo.git("mv", "experiments/exp.yaml", "experiments/new.yaml")
    repo.git("mv", "docs/results/exp", "docs/results/new")
    repo.commit(("experiments/new.yaml", _exp(CRITERION)[1].replace("exp", "new")))
    assert check_preregistration.check(tmp_path, "new").before_data  # renamed, unchanged criterion
    repo.commit(("experiments/new.yaml", _exp(CRITERION.replace(">= 0.05", ">= 0.02"))[1]))
    assert not check_preregistration.check(tmp_path, "new").before_data


BENCH = '"""A bench."""\n\n#: The rule, fixed before the first run: faster when r < 1.\nRULE = {"level": 0.95}\n'


def _bench_repo(tmp_path, monkeypatch) -> "Repo":
    """A throwaway repository whose one registered bench criterion is ``RULE`` of bench/b.py."""
    record = check_preregistration.Record(
        "bench part", (check_preregistration.Piece("bench/b.py", "constant", "RULE"),), "docs/results/b.json",
        "docs/perf.md")
    monkeypatch.setattr(check_preregistration, "BENCHES", (record,))
    return Repo(tmp_path)


def test_a_benchmark_criterion_is_checked_like_an_experiments(tmp_path, monkeypatch, capsys):
    repo = _bench_repo(tmp_path, monkeypatch)
    doc = "# Perf\n\n`bench/b.py`: its rule was committed before the first run.\n"
    repo.commit(("bench/b.py", BENCH), ("docs/perf.md", doc))
    repo.commit(("docs/results/b.json", "{}"))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0
    repo.commit(("bench/b.py", BENCH.replace("0.95", "0.90")))  # the level moved after the data
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "bench part: changed after the data" in capsys.readouterr().err
    repo.commit(("docs/perf.md", doc + "\n`results/b.json`: criteria written after the data.\n"))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0


@pytest.mark.parametrize("where", ["docs/other.md", "bench/other.py"])
def test_a_claim_that_a_criterion_came_first_needs_a_record(tmp_path, capsys, where):
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(False))
    repo.commit(DATA)
    claim = "The success criterion was committed before the first run."
    repo.commit((where, f"# Other\n\n{claim}\n" if where.endswith(".md") else f'"""{claim}"""\n'))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert where in capsys.readouterr().err
    if where.endswith(".md"):  # naming the record it is about, before the claim or in its sentence, answers it
        repo.commit((where, f"# Other\n\nData: `docs/results/exp/runs.csv`. {claim}\n"))
        assert check_preregistration.main(["--repo", str(tmp_path)]) == 0


def test_an_edit_after_the_data_fails_the_check_in_a_clone_of_this_repository(tmp_path):
    """A clone of this repository with one published criterion edited after its data commit: the check fails."""
    _whole_history()
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    repo = Repo.__new__(Repo)
    repo.path = clone
    repo.git("config", "user.email", "a@b.c")
    repo.git("config", "user.name", "a")
    assert check_preregistration.check(clone, "degeneracy").before_data
    spec = clone / "experiments" / "degeneracy.yaml"
    block = check_preregistration.criterion_block(spec.read_text())
    last = block.splitlines()[-1]  # the criterion's last line, not its first paragraph
    spec.write_text(spec.read_text().replace(last, last + " (or TOST within +-0.05)"))
    repo.git("commit", "-q", "-am", "x")
    verdict = check_preregistration.check(clone, "degeneracy")
    assert not verdict.before_data and "after the data" in verdict.why
    assert check_preregistration.main(["--repo", str(clone)]) == 1


def test_deleting_a_criterion_after_the_data_does_not_hide_it(tmp_path, capsys):
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(False))
    repo.commit(DATA)
    repo.commit(("experiments/exp.yaml", "# exp: a claim\nname: exp\n"))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "exp: no criterion in the working tree" in capsys.readouterr().err


def test_an_experiment_that_never_had_a_criterion_is_labelled_as_testing_nothing(tmp_path, capsys):
    (tmp_path / "pilot").mkdir()
    (tmp_path / "registered").mkdir()
    repo = Repo(tmp_path / "pilot")
    pilot = ("experiments/exp.yaml", "# exp: a pilot that sizes a study\nname: exp\n")
    repo.commit(pilot, _docs(False))
    repo.commit(DATA)
    assert check_preregistration.check(repo.path, "exp") is None  # no block: no verdict of its own
    assert check_preregistration.main(["--repo", str(repo.path)]) == 1
    assert "never had a criterion" in capsys.readouterr().err
    descriptive = ("docs/results.md", TABLE.format(label="; no criterion: tests nothing"))
    repo.commit(descriptive)
    assert check_preregistration.main(["--repo", str(repo.path)]) == 0
    assert "exp: no criterion: tests nothing" in capsys.readouterr().out
    # the other label is refused for it, and this label for an experiment that had a criterion
    repo.commit(_docs(True))
    assert check_preregistration.main(["--repo", str(repo.path)]) == 1
    registered = Repo(tmp_path / "registered")
    registered.commit(_exp(CRITERION), descriptive)
    registered.commit(DATA)
    assert check_preregistration.main(["--repo", str(tmp_path / "registered")]) == 1
    assert "remove the label" in capsys.readouterr().err


def test_every_published_part_of_the_benchmarks_with_criteria_has_a_record():
    """The async and soak benchmarks and the compile rule say their criteria came first: each file they publish is
    checked (a record dropped from BENCHES would otherwise go unchecked while its doc still names the script)."""
    recorded = {r.data for r in check_preregistration.BENCHES}
    published = [f"docs/results/{p.parent.name}/{p.name}" for folder in ("async", "soak")
                 for p in (ROOT / "docs" / "results" / folder).glob("*.json")]  # fmt: skip
    assert published and set(published) <= recorded
    assert "docs/results/hf_decode_compile.json" in recorded


# ---- what the criterion is read with: the design, the verdict code, the records themselves ------------------------

BODY = """name: exp
arms:
  A: {estimator: Sign}
  B: {estimator: DrGRPO, args: [--model.lr=1e-4]}
reference: A
seeds: [0, 1, 2, 3]
select: {axis: lr, metric: {name: val/reward_mean}, seeds: [9]}
sweep:
  lr: {1e-4: [--model.lr=1e-4], 3e-4: [--model.lr=3e-4]}
metrics:
  - {name: test/reward_mean, primary: true}
  - {name: test/accuracy}
runtime: pending
"""


def _designed(body: str = BODY) -> tuple[str, str]:
    return "experiments/exp.yaml", f"# exp: a claim\n{CRITERION}#\n# Result: pending\n{body}"


@pytest.mark.parametrize("edit", [
    ("  - {name: test/reward_mean, primary: true}\n  - {name: test/accuracy}",
     "  - {name: test/reward_mean}\n  - {name: test/accuracy, primary: true}"),  # another primary metric
    ("metric: {name: val/reward_mean}", "metric: {name: val/accuracy}"),  # another selection metric
    ("seeds: [0, 1, 2, 3]", "seeds: [0, 1, 2]"),  # a seed dropped
    ("reference: A", "reference: B"),  # the other direction
    ("  - {name: test/accuracy}\n", "  - {name: test/accuracy}\n  - {name: test/pass@4, primary: true}\n"),  # a test
])
def test_an_edit_after_the_data_of_the_design_the_criterion_is_read_with_fails(tmp_path, capsys, edit):
    """The YAML keys that decide how the verdict is read from the runs are held to the data commit like the prose."""
    repo = Repo(tmp_path)
    repo.commit(_designed(), _docs(False))
    repo.commit(DATA)
    assert check_preregistration.check(tmp_path, "exp").before_data
    repo.commit(_designed(BODY.replace(*edit)))
    verdict = check_preregistration.check(tmp_path, "exp")
    assert not verdict.before_data and "design" in verdict.why
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "exp: " in capsys.readouterr().err


def test_keys_that_do_not_decide_the_verdict_may_change_after_the_data(tmp_path):
    """The runtime measured, the runs' arguments (the CLI renames them) and a metric outside the family."""
    repo = Repo(tmp_path)
    repo.commit(_designed(), _docs(False))
    repo.commit(DATA)
    later = (BODY.replace("runtime: pending", "runtime: 8 runs in 99 minutes")
             .replace("--model.lr=", "--model.optim.lr=")
             .replace("  - {name: test/accuracy}\n", "  - {name: test/accuracy}\n  - {name: rollout/len_mean}\n"))
    repo.commit(_designed(later))
    assert check_preregistration.check(tmp_path, "exp").before_data
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0


VERDICT_BENCH = '''"""A bench."""

#: The rule, fixed before the first run: ahead when the difference is at least MARGIN.
RULE = {"margin": 0.05}
#: how many decimals the table prints
DIGITS = 3


def _ahead(diff: float, margin: float) -> bool:
    return diff >= margin


def verdict(diff: float) -> str:
    """The rule's reading."""
    return "ahead" if _ahead(diff, RULE["margin"]) else "inconclusive"


def render(diff: float) -> str:
    return f"{diff:.{DIGITS}f}: {verdict(diff)}"
'''


def _verdict_bench(monkeypatch, tmp_path) -> Repo:
    record = check_preregistration._bench("bench part", "b.py", "b.json", "RULE", code=("verdict",),
                                          doc="docs/perf.md")
    monkeypatch.setattr(check_preregistration, "BENCHES", (record,))
    repo = Repo(tmp_path)
    repo.commit(("bench/b.py", VERDICT_BENCH), ("docs/perf.md", "# Perf\n\n`bench/b.py`: its rule came first.\n"))
    repo.commit(("docs/results/b.json", "{}"))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0
    return repo


@pytest.mark.parametrize("edit", [
    ('return "ahead" if', 'return "ahead" if diff > 0 or'),  # the verdict's own code
    ("return diff >= margin", "return diff >= margin / 2"),  # a helper it calls
    ('RULE = {"margin": 0.05}', 'RULE = {"margin": 0.05}\nRULE["margin"] = 0.02'),  # its constant, changed later
    ('\n\ndef _ahead', '\nRULE = {"margin": 0.02}\n\n\ndef _ahead'),  # a second assignment further down
])
def test_a_benchmark_verdict_or_its_constants_edited_after_the_data_fails(tmp_path, monkeypatch, capsys, edit):
    repo = _verdict_bench(monkeypatch, tmp_path)
    assert VERDICT_BENCH.count(edit[0]) == 1
    repo.commit(("bench/b.py", VERDICT_BENCH.replace(*edit)))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "bench part: " in capsys.readouterr().err


def test_what_the_verdict_does_not_read_may_change_after_the_data(tmp_path, monkeypatch):
    """Its docstring, comments, and code and constants the verdict does not reach (the table's digits)."""
    repo = _verdict_bench(monkeypatch, tmp_path)
    later = (VERDICT_BENCH.replace('"""The rule\'s reading."""', '"""The reading of :data:`RULE`."""')
             .replace("DIGITS = 3", "DIGITS = 4").replace("    return diff >= margin", "    return diff >= margin  # at"))
    repo.commit(("bench/b.py", later))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0


def test_a_second_assignment_of_a_criterion_constant_fails(tmp_path, monkeypatch, capsys):
    """The last assignment is the one the module runs with: a later one further down is a change of the rule."""
    repo = _bench_repo(tmp_path, monkeypatch)
    repo.commit(("bench/b.py", BENCH), ("docs/perf.md", "# Perf\n\n`bench/b.py`: its rule came first.\n"))
    repo.commit(("docs/results/b.json", "{}"))
    repo.commit(("bench/b.py", BENCH + '\n\ndef f():\n    pass\n\n\nRULE = {"level": 0.5}\n'))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "bench part: changed after the data" in capsys.readouterr().err


def test_an_experiment_renamed_without_its_data_fails(tmp_path, capsys):
    """Renaming the YAML alone leaves its data under the old name: neither name may then drop out of the check."""
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(False))
    repo.commit(DATA)
    repo.git("mv", "experiments/exp.yaml", "experiments/new.yaml")
    repo.commit(("experiments/new.yaml", _exp(CRITERION)[1].replace("name: exp", "name: new")))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "docs/results/exp/runs.csv" in err and "experiments/exp.yaml" in err


@pytest.mark.parametrize("amendment", [
    "the primary metric is the greedy accuracy.",
    "the greedy accuracy is read instead of the sampled one.",
    "a difference of at least 0.02 counts as met.",
])
def test_an_amendment_that_changes_what_the_criterion_fixed_is_refused(tmp_path, amendment):
    repo = Repo(tmp_path)
    repo.commit(_exp(TWO_PARAGRAPHS), _docs(False))
    repo.commit(DATA)
    repo.commit(_exp(TWO_PARAGRAPHS + f"#\n# AMENDMENT (after the data): {amendment}\n"))
    verdict = check_preregistration.check(tmp_path, "exp")
    assert not verdict.before_data and "AMENDMENT" in verdict.why and "changes" in verdict.why
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1


def test_a_claim_must_name_its_record_in_its_own_sentence(tmp_path, capsys):
    """A claim about one result answered by naming another record's data elsewhere in the paragraph is no record."""
    repo = Repo(tmp_path)
    repo.commit(_exp(CRITERION), _docs(False))
    repo.commit(DATA)
    para = "The agent's criterion was fixed before its first run. The earlier study: `docs/results/exp/runs.csv`."
    repo.commit(("docs/other.md", f"# Other\n\n{para}\n"))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 1
    assert "docs/other.md" in capsys.readouterr().err
    repo.commit(("docs/other.md", "# Other\n\nThe criterion of `docs/results/exp/runs.csv` was fixed before its "
                                  "first run.\n"))
    assert check_preregistration.main(["--repo", str(tmp_path)]) == 0
