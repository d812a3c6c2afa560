"""One small adapter per framework: import, to/from NumPy, dtypes, jit, vjp, modules and their weights.

The rule: the application reaches a framework through `adapter(name)` (`posenc check`, `port`, `plot`
and the tests alike: arrays, compilation, gradients, constructing a backend's module, reading and writing
its weights), so a new framework is one `Adapter` subclass here and its name in `BACKENDS`. A framework
is imported only when its adapter is used.

The exceptions are code that is framework code by nature, listed with the reason in `FRAMEWORK_CODE`: a
PyTorch training program, the distributed runtimes, checkpoint formats a framework writes, the ONNX
graphs, third-party implementations and two port checks. No other module of `posenc` imports a
framework (`FRAMEWORKS`: the array frameworks, their compilers and runtimes, and the backend packages);
tests/test_layering.py enforces it, lazy and string imports included.

`BACKENDS` (the framework backends) is defined here once; the other axes of `posenc check` are the
dtypes `posenc_np._dtypes.BACKEND_DTYPES` and the modes `posenc.check.registry.MODES` ("eager", "jit":
`Adapter.call`'s `mode`). torch's jit mode compiles with
`torch.compile(fullgraph=True)` on the backend passed as `compile_backend=`, by default
`DEFAULT_TORCH_COMPILE_BACKEND`.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from functools import lru_cache

import numpy as np

from posenc_np.backend import dtype_name, numpy_dtype
from posenc_np.backend import freeze as _freeze

__all__ = ["Adapter", "ADAPTERS", "NotSupported", "trailing_view_base", "CHECK_BACKENDS", "adapter", "adapter_for",
           "BACKENDS", "SPEC", "TORCH_COMPILE_BACKENDS", "DEFAULT_TORCH_COMPILE_BACKEND", "BackendUnavailable",
           "FRAMEWORKS", "FRAMEWORK_CODE", "DEVICE_ENV", "current_device", "check_device_name"]

#: The adapter of the float64 spec (posenc_np): what every backend is compared with.
SPEC = "numpy"
#: The framework backends, in report order: the `--backend` choices of `posenc check`.
BACKENDS = ("torch", "tf", "jax", "mlx")
#: What `posenc check` compares with the spec by default: the framework backends, and ONNX Runtime running
#: the graphs `posenc export` writes (a deployment target, not a package with the contract's functions).
CHECK_BACKENDS = (*BACKENDS, "onnx")
#: torch.compile backends `posenc check` offers. aot_eager captures exactly the same fullgraph as
#: inductor (any graph break fails) and runs it with eager kernels, without Inductor's C++ code
#: generation (~2-20 s per graph on a 2-core CPU); see docs/tolerances.md.
TORCH_COMPILE_BACKENDS = ("aot_eager", "inductor")
DEFAULT_TORCH_COMPILE_BACKEND = "aot_eager"


#: What "a framework" means for the rule above: the top-level modules of the array frameworks, their
#: compilers and runtimes, and posenc's backend packages (each binds one).
FRAMEWORKS = ("torch", "triton", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "flax", "mlx", "onnx",
              "onnxruntime", "posenc_torch", "posenc_tf", "posenc_jax", "posenc_mlx")
#: The modules of `posenc` besides this one that import a framework (a path ending in "/": every module
#: under it), and why.
FRAMEWORK_CODE = {
    "posenc/experiment/": "a PyTorch program: trains small LMs with posenc_torch's modules",
    "posenc/check/distributed/jax_runtime.py": "a JAX distributed runtime: Mesh, NamedSharding, shard_map",
    "posenc/check/distributed/torch_runtime.py": "a PyTorch distributed runtime: torch.distributed (gloo), DTensor",
    "posenc/formats/pt.py": "PyTorch checkpoints are read with torch.load and written with torch.save",
    "posenc/formats/msgpack.py": "Flax checkpoints are flax.serialization msgpack",
    "posenc/formats/dcp.py": "torch distributed checkpoints (torchtitan, Megatron torch_dist) are read and written "
                             "with torch.distributed.checkpoint",
    "posenc/onnx/graphs.py": "builds ONNX graphs (onnx.helper) and runs them on ONNX Runtime",
    "posenc/impl/builtin/": "third-party implementations `posenc check --impl` runs in their own framework",
    "posenc/impl/score_mod.py": "FlexAttention score_mods (`Implementation.from_score_mod`) are evaluated with "
                                "torch.func.vmap and run through torch.nn.attention.flex_attention",
    "posenc/impl/training_torch.py": "autograd probes of torch kernels: version counters, in-place writes, "
                                     "torch.autograd.grad through autograd.Function kernels",
    "posenc/port/presets/bert.py": "builds the Keras BERT embeddings model whose load_weights proves the "
                                   ".weights.h5 layout a port writes",
    "posenc/port/presets/gguf_runtime.py": "runs transformers' torch model on a GGUF's weights to verify a port",
}


class BackendUnavailable(ImportError):
    pass


#: The device every framework's inputs are placed on (`posenc check --device`), for this process and the
#: workers it spawns: one switch, read when an array is made.
DEVICE_ENV = "POSENC_DEVICE"


def current_device() -> str:
    """The device inputs are placed on: `$POSENC_DEVICE`, else "cpu"."""
    return os.environ.get(DEVICE_ENV) or "cpu"


def check_device_name(device: str) -> str:
    """`device` if it is written as the frameworks name devices (`cpu`, `cuda`, `cuda:1`, `mps`, ...), else
    ValueError naming it."""
    kind, sep, index = device.partition(":")
    if not (kind.isascii() and kind.isalpha() and kind.islower()) or (sep and not index.isdigit()):
        raise ValueError(f"device={device!r} is not a device name (cpu, cuda, cuda:N, mps, xpu, tpu, ...)")
    return device


def _device_kind_index(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    return kind, int(index or 0)


def trailing_view_base(array):
    """The C-contiguous array `array` is the view `base[..., :n]` of, or None when it is not such a view."""
    base = getattr(array, "base", None)
    if (isinstance(array, np.ndarray) and not array.flags.c_contiguous and isinstance(base, np.ndarray)
            and base.ndim == array.ndim and base.flags.c_contiguous and base.shape[:-1] == array.shape[:-1]
            and array.strides == base.strides
            and array.__array_interface__["data"][0] == base.__array_interface__["data"][0]):
        return base
    return None


class NotSupported(Exception):
    """This backend cannot express this case (an encoding, dtype or input form it has no graph for).

    `posenc check` records it as a skip with the message as the reason, never as a pass.
    """


class Adapter:
    """Framework-neutral access to one posenc backend package."""

    name: str = ""
    package: str = ""
    framework: str = ""
    #: the distributions whose versions a report records
    distributions: tuple = ()
    #: relative cost in a `posenc check` run, measured on a 2-core CPU (each backend's default run alone on
    #: 2026-12-03: torch 47 s, TF 29 s, JAX 34 s with a warm compilation cache and 120 s cold, ONNX 12 s,
    #: MLX 2 s, NumPy 1 s; docs/performance.md): balances the worker processes
    cost: float = 1.0
    #: whether a second worker may take part of this backend's cases (its import and set-up are cheap next
    #: to its comparisons; torch's and TF's graph tracing state is not worth building twice)
    splittable: bool = False

    def available(self) -> bool:
        return importlib.util.find_spec(self.framework) is not None

    @property
    def module(self):
        return self._load()

    def _load(self):
        try:
            return importlib.import_module(self.package)
        except Exception as error:  # a broken install is reported, never hidden
            raise BackendUnavailable(f"backend {self.name!r} ({self.package}) failed to import: "
                                     f"{type(error).__name__}: {error}") from error

    # conversions -------------------------------------------------------------------------------
    def from_numpy(self, array):
        raise NotImplementedError

    def to_numpy(self, tensor) -> np.ndarray:
        raise NotImplementedError

    def from_numpy_keeping_views(self, array):
        """`from_numpy`, except that a view `base[..., :n]` of a wider C-contiguous array becomes the same
        view of the converted base: a case's non-contiguous input reaches the function non-contiguous
        (in frameworks with views; the others slice a copy)."""
        base = trailing_view_base(array)
        return self.from_numpy(array) if base is None else self.from_numpy(base)[..., : array.shape[-1]]

    def device_refusal(self, device: str) -> str | None:
        """Why this framework cannot place arrays on `device` here (None: it can). The CPU always can."""
        return None if device == "cpu" else f"{self.name} places its arrays on the CPU only"

    def placed(self, array):
        """A framework array just made from NumPy, moved to `current_device()` (a no-op on the CPU)."""
        return array

    #: whether raising can be a correct refusal of a case's inputs (`Case.refusals`): only a backend that
    #: reads a table of positions may refuse positions outside it
    may_refuse: bool = False

    def dtype(self, name):
        """The framework dtype object for a dtype name ("float32", "bfloat16", ...)."""
        raise NotImplementedError

    # compilation and differentiation ---------------------------------------------------------
    def jit(self, fn, *, compile_backend: str = DEFAULT_TORCH_COMPILE_BACKEND):
        """Compile `fn(*arrays)`; non-array arguments must already be bound (closed over).

        `compile_backend` is torch.compile's backend; the other frameworks have one compiler each.
        """
        raise NotImplementedError

    def reshape(self, tensor, shape):
        """`tensor` (this framework's array) reshaped to `shape`."""
        return tensor.reshape(shape)

    def vjp(self, fn, primal, cotangent):
        """The gradient of `sum(fn(primal) * cotangent)` with respect to `primal`, as this framework's array.

        Works eagerly and inside this framework's jit (torch.func.vjp under torch.compile, GradientTape
        under tf.function, jax.vjp under jax.jit); the cotangent is cast to the output's dtype.
        """
        raise NotImplementedError

    def autocast(self, dtype: str = "bfloat16"):
        """A context under which this framework's mixed-precision training runs (torch's `torch.autocast` on
        `current_device()`'s type); NotSupported where the framework has no such context."""
        raise NotSupported(f"{self.name} has no autocast context (torch.autocast is torch's mixed precision)")

    def grad(self, fn, primal, cotangent):
        """`vjp` as a training step computes it, eagerly: torch through `torch.autograd.grad` (so
        `torch.autograd.Function` kernels work, which `torch.func.vjp` refuses); the others through `vjp`.
        The cotangent is used as given (its strides, its dtype), never copied or cast."""
        return self.vjp(fn, primal, cotangent)

    def jit_errors(self, *errors) -> tuple:
        """The exception classes a jit-compiled call raises for `errors` raised while it is traced."""
        return errors

    def compile_cache_environ(self, directory) -> dict:
        """Environment variables that keep this framework's compiled programs under `directory` across
        processes and runs (`posenc check --compile-cache`), set before the framework is imported; {} when it
        has no persistent cache worth keeping."""
        return {}

    def jit_counting_traces(self, fn, *, compile_backend: str = DEFAULT_TORCH_COMPILE_BACKEND):
        """`(compiled fn, traces)`: `jit(fn)` and a function returning how often it has been traced (compiled)
        since. A Python side effect inside the traced function runs once per trace."""
        count = []

        def counted(*args):
            count.append(1)
            return fn(*args)

        return self.jit(counted, compile_backend=compile_backend), lambda: len(count)

    def swapaxes(self, tensor, a: int, b: int):
        """`tensor` with axes `a` and `b` exchanged, as the framework's transposed view where it has one."""
        return tensor.swapaxes(a, b)

    # modules and their weights -------------------------------------------------------------------
    def make_module(self, cls, *args, **kwargs):
        """An instance of the module class `cls` (or the package's class of that name) from `args`/`kwargs`;
        an adapter adds what its framework's modules need besides (Flax NNX: `rngs`)."""
        cls = getattr(self.module, cls) if isinstance(cls, str) else cls
        return cls(*args, **kwargs)

    def weight(self, variable) -> np.ndarray:
        """A module's weight (a parameter or variable of the framework) as a NumPy array of its dtype."""
        return self.to_numpy(variable)

    def set_weight(self, variable, value: np.ndarray) -> None:
        """Overwrite a module's weight in place with `value` (same shape), outside any gradient tape."""
        variable[...] = self.from_numpy(value)

    def layer_norm(self, x, scale, bias, *, eps: float):
        """LayerNorm over the last axis, `(x - mean) / sqrt(var + eps) * scale + bias`, in this framework's ops
        (`x`, `scale`, `bias` this framework's arrays; the biased variance, as torch's `layer_norm`)."""
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / (var + eps) ** 0.5 * scale + bias

    def linear(self, layer) -> tuple:
        """`(weight [out, in], bias)` of a module's dense layer as NumPy float64, in torch's orientation:
        torch and MLX store `weight [out, in]`, Keras `Dense` and NNX `Linear` store `kernel [in, out]`."""
        bias = np.asarray(self.weight(layer.bias), np.float64)
        if hasattr(layer, "kernel"):
            return np.asarray(self.weight(layer.kernel), np.float64).T, bias
        return np.asarray(self.weight(layer.weight), np.float64), bias

    def call(self, fn, args: tuple, kwargs: dict, *, mode: str = "eager", cache: dict | None = None,
             key=None, compile_backend: str = DEFAULT_TORCH_COMPILE_BACKEND):
        """Run `fn(package_module, *args, **kwargs)`; NumPy arrays in `args` become tensors.

        `fn` may be a contract function name (then it is `getattr(package, fn)(*args, **kwargs)`).
        Python scalars and strings in `args`/`kwargs` are bound as constants, so under jit they are
        static and only the arrays are traced. `cache` (a dict) with `key` reuses a compiled function
        across calls: compile once per signature, the cost that dominates a suite run.
        `compile_backend` is torch.compile's backend in jit mode (see `jit`).
        """
        module = self.module
        target = (lambda mod, *a, **k: getattr(mod, fn)(*a, **k)) if isinstance(fn, str) else fn
        is_array = [isinstance(a, np.ndarray) for a in args]
        arrays = [self.from_numpy_keeping_views(a) for a, flag in zip(args, is_array, strict=True) if flag]
        statics = [a for a, flag in zip(args, is_array, strict=True) if not flag]

        def bound(*tensors):
            it_t, it_s = iter(tensors), iter(statics)
            full = [next(it_t) if flag else next(it_s) for flag in is_array]
            return target(module, *full, **kwargs)

        if mode == "eager":
            out = bound(*arrays)
        else:
            full_key = (self.name, compile_backend, key if key is not None else fn, tuple(is_array),
                        _freeze(statics), _freeze(kwargs),
                        tuple((a.shape, str(a.dtype)) for a in args if isinstance(a, np.ndarray)))
            compiled = None if cache is None else cache.get(full_key)
            if compiled is None:
                compiled = self.jit(bound, compile_backend=compile_backend)
                if cache is not None:
                    cache[full_key] = compiled
            out = compiled(*arrays)
        return _map(self.to_numpy, out)

def _map(fn, out):
    if isinstance(out, (tuple, list)):
        return type(out)(_map(fn, o) for o in out)
    if isinstance(out, (float, int)):
        return out
    return fn(out)


class NumpyAdapter(Adapter):
    name, package, framework = "numpy", "posenc_np", "numpy"
    distributions, cost, splittable = ("numpy", "ml_dtypes"), 0.02, True

    def from_numpy(self, array):
        return array

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def dtype(self, name):
        return numpy_dtype(name)

    def jit(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        return fn

    def vjp(self, fn, primal, cotangent):
        """The spec's gradient by central differences with step 1, exact (up to float64 rounding) for
        an `fn` linear in `primal`, which the trainable tables' encodings are (gathers)."""
        primal = np.asarray(primal, np.float64)
        grad = np.zeros_like(primal)
        for index in np.ndindex(primal.shape):
            plus, minus = primal.copy(), primal.copy()
            plus[index] += 1.0
            minus[index] -= 1.0
            grad[index] = np.sum((np.asarray(fn(plus), np.float64) - np.asarray(fn(minus), np.float64))
                                 * cotangent) / 2
        return grad


class TorchAdapter(Adapter):
    name, package, framework = "torch", "posenc_torch", "torch"
    distributions, cost = ("torch",), 1.0

    def from_numpy(self, array):
        import torch

        if array.dtype.kind == "f" or array.dtype == numpy_dtype("bfloat16"):
            name = dtype_name(array.dtype)
            return self.placed(torch.from_numpy(np.ascontiguousarray(array.astype(np.float32) if name == "bfloat16"
                                                                      else array)).to(self.dtype(name)))
        return self.placed(torch.from_numpy(np.ascontiguousarray(array)))

    def device_refusal(self, device):
        import torch

        try:
            place = torch.device(device)
        except RuntimeError as error:
            return f"torch does not know the device {device!r} ({error})"
        if place.type == "cpu":
            return None
        runtime = torch.backends.mps if place.type == "mps" else getattr(torch, place.type, None)
        if runtime is None or not hasattr(runtime, "is_available") or not runtime.is_available():
            return f"torch sees no {place.type} device (torch.{place.type}.is_available() is False)"
        count = runtime.device_count() if hasattr(runtime, "device_count") else 1
        if place.index is not None and place.index >= count:
            return f"torch sees {count} {place.type} device(s), not index {place.index}"
        return None

    def placed(self, array):
        device = current_device()
        return array if device == "cpu" else array.to(device)

    def autocast(self, dtype="bfloat16"):
        import torch

        return torch.autocast(torch.device(current_device()).type, dtype=self.dtype(dtype))

    def to_numpy(self, tensor):
        import torch

        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            return tensor.float().numpy().astype(numpy_dtype("bfloat16"))
        return tensor.numpy()

    def dtype(self, name):
        import torch

        return getattr(torch, dtype_name(name))

    def jit(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        import torch

        if compile_backend not in TORCH_COMPILE_BACKENDS:
            raise ValueError(f"compile_backend={compile_backend!r} is not one of {list(TORCH_COMPILE_BACKENDS)}")
        # every compiled case shares the code object of `Adapter.call.bound`; Dynamo counts its
        # variants against one recompile limit (8 by default), which a suite run passes by design
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4096)
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 1 << 16)
        return torch.compile(fn, fullgraph=True, dynamic=False, backend=compile_backend)

    def vjp(self, fn, primal, cotangent):
        import torch

        out, pullback = torch.func.vjp(fn, primal)
        return pullback(cotangent.to(out.dtype))[0]

    def grad(self, fn, primal, cotangent):
        import torch

        leaf = primal.detach().requires_grad_(True)
        out = fn(leaf)
        (grad,) = torch.autograd.grad(out, leaf, cotangent, allow_unused=True)
        if grad is None:
            raise NotSupported("the function's output does not depend on its input through autograd")
        return grad

    def jit_errors(self, *errors):
        import torch

        # torch.compile(fullgraph=True) reports an error raised while tracing wrapped in Dynamo's Unsupported
        return (*errors, torch._dynamo.exc.Unsupported)

    def jit_counting_traces(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        import torch._dynamo

        # Dynamo replays a Python side effect on every call: count the graphs it compiles instead. The
        # counter is process-wide and reset() leaves it alone, so count from here.
        torch._dynamo.reset()
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        return (self.jit(fn, compile_backend=compile_backend),
                lambda: torch._dynamo.utils.counters["stats"]["unique_graphs"] - before)

    def swapaxes(self, tensor, a, b):
        return tensor.transpose(a, b)  # a non-contiguous view

    def layer_norm(self, x, scale, bias, *, eps):
        import torch.nn.functional as F

        return F.layer_norm(x, (x.shape[-1],), scale, bias, eps=eps)

    def set_weight(self, variable, value):
        import torch

        with torch.no_grad():
            variable.copy_(torch.from_numpy(value))


class TFAdapter(Adapter):
    name, package, framework = "tf", "posenc_tf", "tensorflow"
    distributions, cost = ("tensorflow-cpu", "tensorflow", "keras"), 0.62

    def from_numpy(self, array):
        import tensorflow as tf

        if array.dtype == numpy_dtype("bfloat16"):
            return self.placed(tf.cast(tf.constant(array.astype(np.float32)), tf.bfloat16))
        return self.placed(tf.constant(array))

    def _tf_device(self, device):
        kind, index = _device_kind_index(device)
        return f"/{'CPU' if kind == 'cpu' else 'GPU'}:{index}"

    def device_refusal(self, device):
        import tensorflow as tf

        kind, index = _device_kind_index(device)
        if kind == "cpu":
            return None
        if kind not in ("cuda", "gpu"):
            return f"TensorFlow places arrays on CPU and GPU devices, not {kind}"
        gpus = tf.config.list_physical_devices("GPU")
        return None if index < len(gpus) else f"TensorFlow sees {len(gpus)} GPU(s) (tf.config.list_physical_devices)"

    def placed(self, array):
        import tensorflow as tf

        device = current_device()
        if device == "cpu":
            return array
        with tf.device(self._tf_device(device)):
            return tf.identity(array)

    def to_numpy(self, tensor):
        import tensorflow as tf

        if tensor.dtype == tf.bfloat16:
            return tf.cast(tensor, tf.float32).numpy().astype(numpy_dtype("bfloat16"))
        return tensor.numpy()

    def dtype(self, name):
        import tensorflow as tf

        return getattr(tf, dtype_name(name))

    def jit(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")  # one tf.function per case is the design, not a retracing bug
        # posenc_tf branches only on static Python values, so AutoGraph's source rewrite (more than half of
        # a suite run's TF seconds) has nothing to convert; without it a branch on a tensor fails to trace
        return tf.function(fn, jit_compile=True, reduce_retracing=False, autograph=False)

    def reshape(self, tensor, shape):
        import tensorflow as tf

        return tf.reshape(tensor, shape)

    def swapaxes(self, tensor, a, b):
        import tensorflow as tf

        perm = list(range(len(tensor.shape)))
        perm[a], perm[b] = perm[b], perm[a]
        return tf.transpose(tensor, perm)

    def weight(self, variable):
        return self.to_numpy(variable.value if hasattr(variable, "value") else variable)  # a Keras Variable

    def set_weight(self, variable, value):
        variable.assign(value)

    def layer_norm(self, x, scale, bias, *, eps):
        import tensorflow as tf

        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) / tf.sqrt(var + eps) * scale + bias

    def vjp(self, fn, primal, cotangent):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(primal)
            out = fn(primal)
        return tf.convert_to_tensor(tape.gradient(out, primal, output_gradients=tf.cast(cotangent, out.dtype)))


class JaxAdapter(Adapter):
    name, package, framework = "jax", "posenc_jax", "jax"
    distributions, splittable = ("jax", "jaxlib", "flax"), True

    @property
    def cost(self):
        # its eager calls compile every operation, so a run whose persistent cache (`compile_cache_environ`)
        # holds nothing yet takes longer: the costs that ended both workers of a default run within 2-5 s of
        # each other, warm and cold (docs/performance.md; the share is sensitive: 1.1 left TF's worker 14-17 s
        # behind, 1.4 torch's 9 s)
        directory = os.environ.get("JAX_COMPILATION_CACHE_DIR")
        warm = bool(directory) and os.path.isdir(directory) and any(os.scandir(directory))
        return 0.72 if warm else 1.25

    def compile_cache_environ(self, directory):
        # JAX reads these at import: its persistent cache keeps every executable (its eager calls compile
        # too), keyed by the program and the jaxlib version, so a second run reuses them
        return {"JAX_COMPILATION_CACHE_DIR": os.path.join(directory, "jax"),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}

    def from_numpy(self, array):
        import jax.numpy as jnp

        if array.dtype.kind in "iu":
            info = np.iinfo(np.int32)
            if array.size and (array.min() < info.min or array.max() > info.max):
                # astype would wrap (2**31 + 7 -> -2147483641) and the backend would compute silently wrong
                raise ValueError(f"integer array with values in [{array.min()}, {array.max()}] does not fit int32, "
                                 f"the integer dtype the JAX backend is given (JAX without jax_enable_x64)")
            return self.placed(jnp.asarray(array.astype(np.int32)))  # JAX's default integer without x64
        return self.placed(jnp.asarray(array))

    def _jax_device(self, device):
        import jax

        kind, index = _device_kind_index(device)
        return jax.devices({"cuda": "gpu", "rocm": "gpu"}.get(kind, kind))[index]

    def device_refusal(self, device):
        try:
            self._jax_device(device)
        except (RuntimeError, IndexError, ValueError) as error:
            return f"JAX has no device {device!r} ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
        return None

    def placed(self, array):
        import jax

        device = current_device()
        return array if device == "cpu" else jax.device_put(array, self._jax_device(device))

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def dtype(self, name):
        import jax.numpy as jnp

        return getattr(jnp, dtype_name(name))

    def jit(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        import jax

        return jax.jit(fn)

    def vjp(self, fn, primal, cotangent):
        import jax

        out, pullback = jax.vjp(fn, primal)
        return pullback(cotangent.astype(out.dtype))[0]

    def make_module(self, cls, *args, **kwargs):
        import inspect

        from flax import nnx

        cls = getattr(self.module, cls) if isinstance(cls, str) else cls
        if inspect.isclass(cls) and "rngs" in inspect.signature(cls.__init__).parameters:
            kwargs.setdefault("rngs", nnx.Rngs(0))  # NNX modules create their parameters eagerly
        return cls(*args, **kwargs)

    def weight(self, variable):
        return self.to_numpy(variable[...])  # an NNX Param's value


class MlxAdapter(Adapter):
    """MLX (`mlx.core` arrays); jit is `mx.compile`, the vjp `mx.vjp`. On Linux MLX runs on its CPU
    device (the `mlx[cpu]` install); float64 exists there only (posenc_mlx keeps its float64 on the CPU)."""

    name, package, framework = "mlx", "posenc_mlx", "mlx"
    distributions, cost, splittable = ("mlx", "mlx-cpu", "mlx-metal"), 0.04, True

    def _load(self):
        try:
            return super()._load()
        except BackendUnavailable as error:
            if "libmlx" in str(error):  # plain `pip install mlx` on Linux ships no backend library
                raise BackendUnavailable(f"{error} (on Linux install mlx[cpu], which adds the CPU backend)") from error
            raise

    def from_numpy(self, array):
        import mlx.core as mx

        if array.dtype == np.float64:
            return self.placed(mx.array(array, dtype=mx.float64))  # mx.array alone would make float64 float32
        if array.dtype == numpy_dtype("bfloat16"):
            return self.placed(mx.array(array.astype(np.float32)).astype(mx.bfloat16))
        return self.placed(mx.array(np.ascontiguousarray(array)))

    def device_refusal(self, device):
        import mlx.core as mx

        kind, _ = _device_kind_index(device)
        if kind == "cpu":
            return None
        if kind not in ("gpu", "mps", "metal", "cuda"):
            return f"MLX runs on its cpu and gpu devices, not {kind}"
        return None if mx.is_available(mx.gpu) else "MLX has no GPU device here (mx.is_available(mx.gpu) is False)"

    def placed(self, array):
        import mlx.core as mx

        # MLX arrays live in unified memory: the default device is where the operations on them run
        mx.set_default_device(mx.cpu if current_device() == "cpu" else mx.gpu)
        return array

    def to_numpy(self, tensor):
        import mlx.core as mx

        if tensor.dtype == mx.bfloat16:
            return np.array(tensor.astype(mx.float32)).astype(numpy_dtype("bfloat16"))
        return np.array(tensor)

    def dtype(self, name):
        import mlx.core as mx

        return getattr(mx, dtype_name(name))

    def jit(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        import mlx.core as mx

        return mx.compile(fn)

    def jit_counting_traces(self, fn, *, compile_backend=DEFAULT_TORCH_COMPILE_BACKEND):
        import mlx.core as mx

        # mlx 0.32.4 traces a process's first compiled function twice (on its first two calls) when nothing
        # was evaluated before it (measured); one evaluation first makes the count the compiler's own
        mx.eval(mx.array(0) + 1)
        return super().jit_counting_traces(fn, compile_backend=compile_backend)

    def vjp(self, fn, primal, cotangent):
        import mlx.core as mx

        out = fn(primal)  # lazy: only its dtype is read here
        return mx.vjp(lambda p: fn(p), [primal], [cotangent.astype(out.dtype)])[1][0]


class OnnxAdapter(NumpyAdapter):
    """ONNX Runtime (CPU) running the graphs `posenc export` writes (`posenc/onnx/backend.py`).

    "eager" runs with every graph optimisation off, "jit" with `ORT_ENABLE_ALL` (fusions included). A case
    the graphs cannot express (bfloat16, gradients, attention paths, dynamic NTK, ...) raises `NotSupported`.
    """

    name, package, framework = "onnx", "posenc.onnx.backend", "onnxruntime"
    distributions, cost, splittable = ("onnx", "onnxruntime"), 0.26, True
    #: the graphs read a cos/sin cache (ONNX Runtime's RotaryEmbedding refuses positions outside it)
    may_refuse = True

    def available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))

    def vjp(self, fn, primal, cotangent):
        raise NotSupported("the ONNX graphs have no gradients")

    def call(self, fn, args: tuple, kwargs: dict, *, mode: str = "eager", cache: dict | None = None,
             key=None, compile_backend: str = DEFAULT_TORCH_COMPILE_BACKEND):
        backend = self.module
        try:
            return backend.onnx_call(fn, args, kwargs, optimize=mode == "jit", cache=cache)
        except backend.NotExportable as error:
            raise NotSupported(str(error)) from None


ADAPTERS = {a.name: a for a in (NumpyAdapter(), TorchAdapter(), TFAdapter(), JaxAdapter(), MlxAdapter(), OnnxAdapter())}


@lru_cache(maxsize=None)
def adapter(name: str) -> Adapter:
    """The adapter of a backend name: "numpy" (the spec) or one of `BACKENDS`."""
    if name not in ADAPTERS:
        raise ValueError(f"backend={name!r} is not one of {list(ADAPTERS)}")
    return ADAPTERS[name]


def adapter_for(package) -> Adapter:
    """The adapter of a posenc package module (posenc_np, posenc_torch, ...) or its name."""
    name = getattr(package, "__name__", package)
    for candidate in ADAPTERS.values():
        if candidate.package == name:
            return candidate
    raise ValueError(f"package={name!r} is not a posenc package; known: "
                     f"{', '.join(a.package for a in ADAPTERS.values())}")
