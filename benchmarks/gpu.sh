#!/usr/bin/env bash
# RoPE on an accelerator: copy bandwidth, RoPE as a share of it, and `posenc check` there; one Markdown report.
#
#   benchmarks/gpu.sh [OUT_DIR] [bench_gpu.py options, e.g. --small for a quick CPU test]
#
# Writes OUT_DIR/gpu-rope.md (benchmarks/bench_gpu.py's table), OUT_DIR/check.md and OUT_DIR/check.json
# (`posenc check --device cuda --backend torch,jax`), OUT_DIR/kernels.md and kernels.json (the installed GPU
# kernels' built-ins on that device: Liger, flash-attn, Transformer Engine, transformers), OUT_DIR/gpu-only.md and
# gpu-only.json (the GPU-only built-ins flash-attn-alibi, transformer-engine-fused, xformers), OUT_DIR/report.md.
# OUT_DIR defaults to gpu-run-<date>. Runs on a CPU-only machine too (then every figure is a CPU figure); a quick
# CPU test: POSENC_CHECK_ARGS="--encoding sinusoidal" benchmarks/gpu.sh /tmp/gpu-test --small --reps 3
#
# Installs nothing when the frameworks import already (a GPU machine's own CUDA builds of torch/JAX are
# kept: the pinned README install would replace them with the CPU builds of constraints.txt). Only when
# one is missing does it run the README's install command, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-run-$(date -u +%Y%m%d-%H%M)}"
[ $# -gt 0 ] && shift
mkdir -p "$out"
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! python -c "import torch, jax, tensorflow, posenc_np" 2>/dev/null; then
  echo "a framework is missing: running the README install command" >&2
  pip install -c constraints.txt -e ".[all,dev]" && pip install --no-deps -r requirements-nodeps.txt
fi

{
  echo "# posenc GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo '```'
  (nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: no NVIDIA GPU visible")
  python - <<'EOF'
import platform
print("python", platform.python_version(), platform.machine())
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())
import jax
print("jax", jax.__version__, "devices:", jax.devices())
import tensorflow as tf
print("tensorflow", tf.__version__, "GPUs:", tf.config.list_physical_devices("GPU"))
EOF
  echo '```'
} > "$out/report.md"

python benchmarks/bench_gpu.py --out "$out/gpu-rope.md" "$@"

# posenc check there: --device places every framework's inputs on the GPU (cuda when torch sees one;
# POSENC_DEVICE overrides): posenc's own backends, then the kernels that live on GPUs, natively: the Triton
# built-ins in bfloat16 too (Triton's CPU interpreter has none), with their training cases (backward,
# aliasing, table gradients)
device="${POSENC_DEVICE:-$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
kernels=$(python -c 'from posenc.impl.builtin import builtin_status as s; print(",".join(n for n in ("liger-kernel", "flash-attn", "transformer-engine", "transformers") if s(n)[0]))')
start=$(date +%s)
set +e
# shellcheck disable=SC2086  # POSENC_CHECK_ARGS: extra filters, e.g. "--encoding rope" for a quick test
python -m posenc check --device "$device" --backend torch,jax -q --markdown "$out/check.md" --json "$out/check.json" \
  ${POSENC_CHECK_ARGS:-}
status=$?
python -m posenc check --device "$device" --impl "$kernels" --encoding rope --timeout 540 -q \
  --markdown "$out/kernels.md" --json "$out/kernels.json"
kernel_status=$?
# the GPU-only built-ins (CUDA kernels alone: flash-attn's in-kernel ALiBi, TE's fused RoPE, xformers' rope_padded);
# without CUDA or their CUDA extension every case is a skip naming what is missing (docs/impl.md, "GPU-only built-ins")
gpu_only=$(python -c 'from posenc.impl.builtin import builtin_status as s; print(",".join(n for n in ("flash-attn-alibi", "transformer-engine-fused", "xformers") if s(n)[0]))')
gpu_only_status=none
if [ -n "$gpu_only" ]; then
  python -m posenc check --device "$device" --impl "$gpu_only" --encoding rope,alibi --timeout 540 -q \
    --markdown "$out/gpu-only.md" --json "$out/gpu-only.json"
  gpu_only_status=$?
fi
set -e
{
  echo
  cat "$out/gpu-rope.md"
  echo
  echo "## posenc check --device $device --backend torch,jax"
  echo
  echo "exit status $status; table: check.md, details: check.json"
  echo
  tail -n 5 "$out/check.md" 2>/dev/null || true
  echo
  echo "## posenc check --device $device --impl $kernels --encoding rope (native kernels, training cases included)"
  echo
  echo "exit status $kernel_status; the check runs $(( $(date +%s) - start )) s; table: kernels.md, details: kernels.json"
  echo
  tail -n 5 "$out/kernels.md" 2>/dev/null || true
  echo
  echo "## posenc check --device $device --impl ${gpu_only:-(none installed)} --encoding rope,alibi (GPU-only built-ins)"
  echo
  echo "exit status $gpu_only_status; table: gpu-only.md, details: gpu-only.json"
  echo
  tail -n 5 "$out/gpu-only.md" 2>/dev/null || true
} >> "$out/report.md"
echo "wrote $out/report.md"
exit $status
