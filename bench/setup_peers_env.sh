#!/usr/bin/env bash
# Create bench/.venv-peers: the environment of bench/conformance.py, which runs golden rewards and masks
# through the peers' own advantage and loss functions. None of these packages is a dependency of lit-grpo;
# they live only here.
#
#   bash bench/setup_peers_env.sh                      a clean environment: torch 2.13.0 (CPU), lit-grpo, the peers
#   bash bench/setup_peers_env.sh --share .venv        faster: reuse the packages of an existing lit-grpo
#                                                      environment (linked by a .pth file), install only the peers
#
# What is installed, and why:
# - Hugging Face TRL 1.16.0 with its dependencies (GRPOTrainer runs on the CPU as it is).
# - verl 0.9.1 and OpenRLHF 0.11.2 WITHOUT their dependencies (they pin GPU stacks: vLLM, flash-attn,
#   CUDA builds of torch). Only what importing verl.trainer.ppo.core_algos needs (omegaconf, tensordict,
#   codetiming, orjson, ray) and what importing openrlhf.models.loss needs (deepspeed and hjson, without
#   their dependencies) is added. bench/conformance.py imports those two modules without running the
#   packages' __init__ (which import the GPU stack); OpenRLHF's advantage code
#   (openrlhf.trainer.ppo_utils.experience_maker) imports flash-attn and is not run on the CPU.
# Set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu where the CPU wheel is not on a configured index.
# The environment ignores itself in git (a .gitignore with "*" inside it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
env="$here/bench/.venv-peers"
python="${PYTHON:-python3}"
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
pip() { "$env/bin/python" -m pip install ${index_args[@]+"${index_args[@]}"} "$@"; }

if [[ -n "$share" ]]; then
  "$share/bin/python" -m venv "$env"
  shared_site="$("$share/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  own_site="$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$shared_site" > "$own_site/_shared_lit_grpo_env.pth"
else
  "$python" -m venv "$env"
  pip "torch==2.13.0"
  pip -e "$here"
fi
echo "*" > "$env/.gitignore"
pip "trl==1.16.0"
pip --no-deps "verl==0.9.1" "openrlhf==0.11.2" "deepspeed==0.19.8" "hjson==3.1.0"
pip "omegaconf==2.4.0" "codetiming==1.4.0" "orjson==3.13.0" "ray==2.60.0" "msgpack==1.2.4" "ninja" "py-cpuinfo"
pip --no-deps "tensordict==0.15.3" "pyvers==0.2.3"
"$env/bin/python" "$here/bench/conformance.py" --check-imports
