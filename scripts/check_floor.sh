#!/usr/bin/env bash
# An optional extra at the lowest version pyproject.toml allows: install that version (with what it pulls in, as
# a new install would resolve it today) into a temporary folder that shadows the environment's copy, and run the
# tests of the code that uses it. Run with the environment that has every extra (the second pass of .ci/run):
#   PYTHON=.venv/bin/python bash scripts/check_floor.sh "mcp==1.21.1" tests/envs/test_mcp_tools.py
# Exit status: pytest's. KEEP=1 keeps the folder.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: check_floor.sh REQUIREMENT TEST_PATH... (e.g. \"mcp==1.21.1\" tests/envs/test_mcp_tools.py)" >&2
  exit 2
fi
requirement="$1"; shift
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/lit-grpo-floor.XXXXXX")"
if [[ -z "${KEEP:-}" ]]; then trap 'rm -rf "$work"' EXIT; else echo "keeping $work"; fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$python" -m pip install -q --target "$work/site" "$requirement"
PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" "$python" - "$requirement" <<'PY'
import sys
from importlib.metadata import version
from packaging.requirements import Requirement

req = Requirement(sys.argv[1])
have = version(req.name)
if not req.specifier.contains(have):
    sys.exit(f"check_floor: {req.name} {have} is imported, not {req}: the folder does not shadow it")
print(f"check_floor: {req.name} {have} from the temporary folder")
PY
PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}" "$python" -m pytest -q -p no:cacheprovider "$@"
