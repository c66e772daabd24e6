#!/usr/bin/env bash
# The installed package, as a new user gets it: build the wheel from this tree, check what it holds, install it
# with its dependencies into a fresh virtual environment, and from an empty directory run
#   lit-grpo --version; lit-grpo curves; lit-grpo configs list; lit-grpo fit --config quickstart --trainer.max_steps=2
# (which must train and print the before/after report). Called by .ci/run; run it alone with
#   bash scripts/check_wheel.sh
# Packages come from the configured package index (pip's cache and local wheels are reused); torch is installed
# first as scripts/install.sh does (TORCH_SPEC, TORCH_INDEX_URL). Nothing is downloaded at run time: the hubs are
# set offline. KEEP=1 keeps the temporary folder (wheel, environment, run) for a look afterwards.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/lit-grpo-wheel.XXXXXX")"
if [[ -z "${KEEP:-}" ]]; then trap 'rm -rf "$work"' EXIT; else echo "keeping $work"; fi
unset PYTHONPATH  # only the installed package may be imported
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS
step() { echo "[check_wheel $((SECONDS - start)) s] $*"; }

# The tree as git sees it (tracked and new files, not ignored ones such as build/ or .venv/), so that nothing
# left over from another build ends up in the wheel.
step "copying the source tree"
mkdir -p "$work/src"
git -C "$here" ls-files -z --cached --others --exclude-standard \
  | (cd "$here" && tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$work/src"

step "creating a fresh virtual environment"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"

step "building the wheel"
"$venv_python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/lit_grpo-*.whl)"
step "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

# What the wheel holds: lit_grpo alone at the top, every module of the source, the built-in configs, experiments
# and the quickstart's starting policy.
"$venv_python" - "$wheel" "$work/src" <<'EOF'
import sys
import zipfile
from pathlib import Path

wheel, src = Path(sys.argv[1]), Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
top = {n.split("/")[0] for n in names}
dist_info = {t for t in top if t.endswith(".dist-info")}
assert top - dist_info == {"lit_grpo"}, f"top-level entries other than lit_grpo: {sorted(top - dist_info)}"
expected = {f"lit_grpo/{p.relative_to(src / 'lit_grpo').as_posix()}" for p in (src / "lit_grpo").rglob("*.py")}
expected |= {f"lit_grpo/_data/{p.relative_to(src).as_posix()}" for folder in ("configs", "experiments")
             for p in (src / folder).rglob("*.yaml")}
expected |= {f"lit_grpo/_data/{p.relative_to(src).as_posix()}" for p in (src / "assets").rglob("*") if p.is_file()}
missing = sorted(expected - names)
assert not missing, f"the wheel lacks {len(missing)} files of the source tree, e.g. {missing[:5]}"
assert "lit_grpo/_data/assets/tiny-arith-sft/model.safetensors" in names
print(f"wheel contents: {len(names)} files, top level {sorted(top)}; every module, config, experiment and asset")
EOF

step "installing torch (${TORCH_SPEC:-torch==2.13.0}), then the wheel with its dependencies"
index_args=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then index_args=(--extra-index-url "$TORCH_INDEX_URL"); fi
"$venv_python" -m pip install --quiet ${index_args[@]+"${index_args[@]}"} "${TORCH_SPEC:-torch==2.13.0}"
"$venv_python" -m pip install --quiet ${index_args[@]+"${index_args[@]}"} "$wheel"
"$venv_python" -m pip check

# From an empty directory, as a new user would.
mkdir "$work/empty"
cd "$work/empty"
lit="$work/venv/bin/lit-grpo"

step "lit-grpo --version"
version="$("$lit" --version)"
echo "$version"
wheel_version="$(basename "$wheel" | cut -d- -f2)"
[[ "$version" == "lit-grpo $wheel_version "* ]] || { echo "FAIL: --version does not name $wheel_version"; exit 1; }
where="$("$venv_python" -c 'import lit_grpo; print(lit_grpo.__file__)')"
[[ "$where" == "$work/venv/"* ]] || { echo "FAIL: lit_grpo imported from $where, not the environment"; exit 1; }
if "$venv_python" -c 'import callbacks' 2>/dev/null; then echo "FAIL: a top-level callbacks package is installed"; exit 1; fi

step "lit-grpo curves (a command of the one table besides fit and configs)"
"$lit" curves --estimators Sign OPO -G 4 > curves.txt || { cat curves.txt; echo "FAIL: lit-grpo curves"; exit 1; }
grep -q '^| OPO ' curves.txt || { cat curves.txt; echo "FAIL: lit-grpo curves printed no OPO row"; exit 1; }

step "lit-grpo configs list"
"$lit" configs list > configs.txt
grep -qE '^  quickstart ' configs.txt && grep -qE '^  real/quickstart ' configs.txt && grep -qE '^  passk_crossing ' configs.txt \
  || { cat configs.txt; echo "FAIL: configs list lacks quickstart, real/quickstart or passk_crossing"; exit 1; }
echo "$(grep -c '^  ' configs.txt) built-in configs and experiments listed"

step "lit-grpo fit --config quickstart --trainer.max_steps=2"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" "$lit" fit --config quickstart --trainer.max_steps=2 \
  --trainer.enable_progress_bar=false > fit.log 2>&1 || { tail -40 fit.log; echo "FAIL: the quickstart did not run"; exit 1; }
grep -A2 "Held-out prompts" fit.log
grep -q "accuracy .*before .*after" fit.log || { tail -40 fit.log; echo "FAIL: no before/after report"; exit 1; }
config="runs/quickstart/version_0/config.yaml"
[[ -f "$config" ]] || { find . | head -20; echo "FAIL: no $config in the working directory"; exit 1; }
head -1 "$config" | grep -q "^# lit-grpo $wheel_version " || { head -3 "$config"; echo "FAIL: $config lacks the version"; exit 1; }
ls runs/quickstart/version_0/events.* > /dev/null

step "passed: the wheel installs and runs the quickstart from an empty directory"
