"""keras.ops.image.resize on keras' torch backend (`--impl keras-torch`): see keras_resize.py for the mapping,
the kernel this backend computes and the precision."""

from __future__ import annotations

from .keras_resize import install, load_backend, names, process_environ

DISTRIBUTION = "keras"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = names("torch")
INSTALL = install("torch")
#: set by the worker process that runs this SPEC alone, before keras is imported
PROCESS_ENVIRON = process_environ("torch")
#: upstream behaviour the checks found (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "keras-torch",
        "title": "bicubic resize computes a different kernel on each keras backend",
        "text": ("`keras.ops.image.resize(x, size, interpolation='bicubic')` (keras 3.15.1, antialias=False) is "
                 "PyTorch's bicubic (Keys a = -0.75, clamped borders) on the torch backend and a = -0.5 with the "
                 "taps outside the image dropped and renormalised on the numpy, jax and tensorflow backends "
                 "(TF's also quantised to a 1024-entry kernel table), so one model's resized position table "
                 "depends on KERAS_BACKEND: the weights are 5.7e-2 apart at 7 -> 16 rows; keras-hub's DINOV2 "
                 "grids differ by 1.6e-2..5e-2 (research families-2026-12 section 2.2). posenc names the two "
                 "kernels: `resize_table(method='cubic')` and `resize_table(method='cubic', cubic_a=-0.5, "
                 "border='renormalize')`."),
        "reproduction": ("import json, os, subprocess, sys\n"
                         "import numpy as np\n"
                         "probe = ('import json, numpy as np, keras\\n'\n"
                         "         'x = np.eye(7, dtype=\"float32\")[None, :, :, None]\\n'\n"
                         "         'y = keras.ops.image.resize(x, (16, 7), interpolation=\"bicubic\")\\n'\n"
                         "         'print(json.dumps(np.asarray(keras.ops.convert_to_numpy(y)).tolist()))')\n"
                         "def weights(backend):\n"
                         "    env = {**os.environ, 'KERAS_BACKEND': backend, 'TF_CPP_MIN_LOG_LEVEL': '3'}\n"
                         "    out = subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True,\n"
                         "                         text=True, check=True).stdout.splitlines()[-1]\n"
                         "    return np.asarray(json.loads(out))[0, :, :, 0]\n"
                         "torch_w, numpy_w = weights('torch'), weights('numpy')\n"
                         "gap = float(np.abs(torch_w - numpy_w).max())\n"
                         "print('torch vs numpy backend bicubic weights differ by', gap)  # 5.7e-2"),
        "still": "gap > 1e-2",
    },
)
#: the verdicts at the pinned version: every float32 comparison that fails or errors
EXPECTED = {}


def load():
    return load_backend("torch")
