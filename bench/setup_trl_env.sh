#!/usr/bin/env bash
# Create bench/.venv-trl: the benchmark's own environment with Hugging Face TRL, the peer trainer that
# bench/grpo_step (python -m bench.grpo_step) compares against. TRL is never a dependency of lit-grpo; it lives only here.
#
#   bash bench/setup_trl_env.sh                      a clean environment: torch 2.13.0 (CPU), lit-grpo, trl 1.16.0
#   bash bench/setup_trl_env.sh --share .venv        faster: reuse the packages of an existing lit-grpo
#                                                    environment (linked by a .pth file), install only what
#                                                    trl adds
#
# Both sides of the comparison must run the same torch: the clean install pins torch==2.13.0 exactly as
# scripts/install.sh does (set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu where the CPU wheel is
# not on a configured index). The environment ignores itself in git (a .gitignore with "*" inside it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
env="$here/bench/.venv-trl"
python="${PYTHON:-python3}"
trl_spec="${TRL_SPEC:-trl==1.16.0}"
share=""
case "${1:-}" in
  "") ;;
  --share) share="$(cd "${2:?usage: $0 --share <existing lit-grpo venv>}" && pwd)" ;;
  *) echo "usage: $0 [--share <existing lit-grpo venv>]" >&2; exit 2 ;;
esac

index_args=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  index_args=(--extra-index-url "$TORCH_INDEX_URL")
fi

if [[ -n "$share" ]]; then
  "$share/bin/python" -m venv "$env"
  shared_site="$("$share/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  own_site="$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # the shared packages, and this checkout (the runners import lit-grpo for the workloads' prompts and rewards;
  # an editable install's own .pth is not read from a directory added by a .pth)
  printf '%s\n%s\n' "$shared_site" "$here" > "$own_site/_shared_lit_grpo_env.pth"
else
  "$python" -m venv "$env"
  "$env/bin/python" -m pip install ${index_args[@]+"${index_args[@]}"} "torch==2.13.0"
  "$env/bin/python" -m pip install ${index_args[@]+"${index_args[@]}"} -e "$here"
fi
echo "*" > "$env/.gitignore"
"$env/bin/python" -m pip install ${index_args[@]+"${index_args[@]}"} "$trl_spec"
"$env/bin/python" -c "import torch, trl, transformers, lit_grpo; \
assert torch.__version__.startswith('2.13.0'), torch.__version__; \
print('trl', trl.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
