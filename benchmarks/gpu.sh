#!/usr/bin/env bash
# RoPE on an accelerator: copy bandwidth, RoPE as a share of it, and `posenc check` there; one Markdown report.
#
#   benchmarks/gpu.sh [OUT_DIR] [bench_gpu.py options, e.g. --small for a quick CPU test]
#
# Writes OUT_DIR/gpu-rope.md (benchmarks/bench_gpu.py's table), OUT_DIR/check.md and OUT_DIR/check.json
# (`posenc check --backend torch,jax`), and OUT_DIR/report.md (machine, versions, both). OUT_DIR
# defaults to gpu-run-<date>. Runs on a CPU-only machine too (then every figure is a CPU figure); a quick
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

# posenc check on this machine: JAX runs on its default device (the GPU with a CUDA jaxlib); the torch
# adapter builds its inputs with torch.from_numpy, so its cases run on the CPU (report.md says which).
start=$(date +%s)
set +e
# shellcheck disable=SC2086  # POSENC_CHECK_ARGS: extra filters, e.g. "--encoding rope" for a quick test
python -m posenc check --backend torch,jax -q --markdown "$out/check.md" --json "$out/check.json" ${POSENC_CHECK_ARGS:-}
status=$?
set -e
{
  echo
  cat "$out/gpu-rope.md"
  echo
  echo "## posenc check --backend torch,jax"
  echo
  echo "exit status $status in $(( $(date +%s) - start )) s; table: check.md, details: check.json"
  echo
  tail -n 5 "$out/check.md" 2>/dev/null || true
} >> "$out/report.md"
echo "wrote $out/report.md"
exit $status
