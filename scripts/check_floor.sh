#!/usr/bin/env bash
# Optional extras at the lowest versions pyproject.toml allows (scripts/extra_floors.txt): each requirement is
# installed, with what it pulls in as a new install would resolve it today, into a temporary folder that shadows
# the environment's copy, and the tests of the code that uses it run against it. Run with the environment that
# has every extra (the second pass of .ci/run): a process the tests start with an environment of its own (the MCP
# tests' stdio server) imports the environment's copy, so only lit-grpo's side is held to the floor.
#   PYTHON=.venv/bin/python bash scripts/check_floor.sh            # every extra of the file
#   PYTHON=.venv/bin/python bash scripts/check_floor.sh mcp slurm  # these extras
# Exit status: 0 when every check passed, else 1 (each check's pytest output says what failed). KEEP=1 keeps the
# temporary folders.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
floors="$here/scripts/extra_floors.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1
declare -A wanted=()
for extra in "$@"; do
  if ! grep -qE "^$extra[[:space:]]" "$floors"; then
    echo "check_floor: no line for the extra '$extra' in scripts/extra_floors.txt" >&2
    exit 2
  fi
  wanted[$extra]=1
done

failed=()
while read -r extra requirement tests; do
  [[ -z "$extra" || "$extra" == \#* ]] && continue
  [[ $# -gt 0 && -z "${wanted[$extra]:-}" ]] && continue
  work="$(mktemp -d "${TMPDIR:-/tmp}/lit-grpo-floor.XXXXXX")"
  echo "check_floor: $extra at $requirement ($work)"
  if ! "$python" -m pip install -q --target "$work/site" "$requirement"; then
    failed+=("$extra (pip could not install $requirement)")
  elif ! PYTHONPATH="$work/site" "$python" -c "
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
req = Requirement(sys.argv[1])
have = version(req.name)
sys.exit(0 if req.specifier.contains(have) else f'{req.name} {have} is imported, not {req}')
" "$requirement"; then
    failed+=("$extra (the temporary folder did not shadow the installed copy)")
  else
    # shellcheck disable=SC2086  # the test paths are words
    (cd "$here" && PYTHONPATH="$work/site" "$python" -m pytest -q -p no:cacheprovider $tests) \
      || failed+=("$extra at $requirement")
  fi
  [[ -z "${KEEP:-}" ]] && rm -rf "$work"
done < "$floors"

if ((${#failed[@]})); then
  printf 'check_floor: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "check_floor: every check passed"
