#!/usr/bin/env bash
# flash-attn's Python files for `posenc check --impl flash-attn` on a machine without CUDA: its Triton rotary
# kernel (flash_attn/ops/triton/rotary.py) runs in Triton's interpreter.
#
# flash-attn is an sdist whose setup builds CUDA extensions or downloads a prebuilt CUDA wheel;
# FLASH_ATTENTION_SKIP_CUDA_BUILD with FLASH_ATTENTION_FORCE_BUILD installs the Python package alone. Its
# `import flash_attn` then fails (the CUDA extension is missing), so it goes to a directory of its own that
# PYTHONPATH adds, not into the environment where other code looks for flash_attn.
#
# Usage: scripts/install_flash_attn_cpu.sh [TARGET_DIR]   (default .flash-attn-cpu), then
#        PYTHONPATH=TARGET_DIR python -m posenc check --impl flash-attn --encoding rope
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-.flash-attn-cpu}
FLASH_ATTN_VERSION=${FLASH_ATTN_VERSION:-2.8.3.post2}
pip install --no-deps "triton==3.9.0"  # the interpreter (requirements-nodeps.txt pins it)
pip install einops  # layers/rotary.py (ApplyRotaryEmb, the autograd Function models call) imports it
FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=TRUE \
    pip install --no-deps --no-build-isolation --target "$TARGET" "flash-attn==${FLASH_ATTN_VERSION}"
PYTHONPATH="$TARGET" python -m posenc check --impl list | grep -E "^flash-attn "
