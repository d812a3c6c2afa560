"""One small adapter per framework: import, to/from NumPy, jit, dtypes.

The equivalence suite (`posenc check`) and the tests use these and nothing else to reach a backend,
so a new backend is one class here. A framework is imported only when its adapter is loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from functools import lru_cache

import numpy as np

from posenc_np._dtypes import dtype_name, numpy_dtype
from posenc_np._freeze import freeze as _freeze

__all__ = ["Adapter", "ADAPTERS", "adapter", "BACKENDS", "MODES", "BackendUnavailable"]

BACKENDS = ("numpy", "torch", "tf", "jax")
MODES = ("eager", "jit")


class BackendUnavailable(ImportError):
    pass


class Adapter:
    """Framework-neutral access to one posenc backend package."""

    name: str = ""
    package: str = ""
    framework: str = ""

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

    def dtype(self, name):
        """The framework dtype object for a dtype name ("float32", "bfloat16", ...)."""
        raise NotImplementedError

    # compilation -------------------------------------------------------------------------------
    def jit(self, fn):
        """Compile `fn(*arrays)`; non-array arguments must already be bound (closed over)."""
        raise NotImplementedError

    def call(self, fn, args: tuple, kwargs: dict, *, mode: str = "eager", cache: dict | None = None,
             key=None):
        """Run `fn(package_module, *args, **kwargs)`; NumPy arrays in `args` become tensors.

        `fn` may be a contract function name (then it is `getattr(package, fn)(*args, **kwargs)`).
        Python scalars and strings in `args`/`kwargs` are bound as constants, so under jit they are
        static and only the arrays are traced. `cache` (a dict) with `key` reuses a compiled function
        across calls: compile once per signature, the cost that dominates a suite run.
        """
        module = self.module
        target = (lambda mod, *a, **k: getattr(mod, fn)(*a, **k)) if isinstance(fn, str) else fn
        is_array = [isinstance(a, np.ndarray) for a in args]
        arrays = [self.from_numpy(a) for a, flag in zip(args, is_array) if flag]
        statics = [a for a, flag in zip(args, is_array) if not flag]

        def bound(*tensors):
            it_t, it_s = iter(tensors), iter(statics)
            full = [next(it_t) if flag else next(it_s) for flag in is_array]
            return target(module, *full, **kwargs)

        if mode == "eager":
            out = bound(*arrays)
        else:
            full_key = (self.name, key if key is not None else fn, tuple(is_array), _freeze(statics), _freeze(kwargs),
                        tuple((a.shape, str(a.dtype)) for a in args if isinstance(a, np.ndarray)))
            compiled = None if cache is None else cache.get(full_key)
            if compiled is None:
                compiled = self.jit(bound)
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

    def from_numpy(self, array):
        return array

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def dtype(self, name):
        return numpy_dtype(name)

    def jit(self, fn):
        return fn


class TorchAdapter(Adapter):
    name, package, framework = "torch", "posenc_torch", "torch"

    def from_numpy(self, array):
        import torch

        if array.dtype.kind == "f" or array.dtype == numpy_dtype("bfloat16"):
            name = dtype_name(array.dtype)
            return torch.from_numpy(np.ascontiguousarray(array.astype(np.float32) if name == "bfloat16" else array)
                                    ).to(self.dtype(name))
        return torch.from_numpy(np.ascontiguousarray(array))

    def to_numpy(self, tensor):
        import torch

        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            return tensor.float().numpy().astype(numpy_dtype("bfloat16"))
        return tensor.numpy()

    def dtype(self, name):
        import torch

        return getattr(torch, dtype_name(name))

    def jit(self, fn):
        import torch

        # POSENC_TORCH_COMPILE_BACKEND=aot_eager traces exactly the same graph (fullgraph: any graph
        # break fails) without Inductor's C++ code generation; see docs/tolerances.md.
        backend = os.environ.get("POSENC_TORCH_COMPILE_BACKEND", "inductor")
        # every compiled case shares the code object of `Adapter.call.bound`; Dynamo counts its
        # variants against one recompile limit (8 by default), which a suite run passes by design
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4096)
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 1 << 16)
        return torch.compile(fn, fullgraph=True, dynamic=False, backend=backend)


class TFAdapter(Adapter):
    name, package, framework = "tf", "posenc_tf", "tensorflow"

    def from_numpy(self, array):
        import tensorflow as tf

        if array.dtype == numpy_dtype("bfloat16"):
            return tf.cast(tf.constant(array.astype(np.float32)), tf.bfloat16)
        return tf.constant(array)

    def to_numpy(self, tensor):
        import tensorflow as tf

        if tensor.dtype == tf.bfloat16:
            return tf.cast(tensor, tf.float32).numpy().astype(numpy_dtype("bfloat16"))
        return tensor.numpy()

    def dtype(self, name):
        import tensorflow as tf

        return getattr(tf, dtype_name(name))

    def jit(self, fn):
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")  # one tf.function per case is the design, not a retracing bug
        return tf.function(fn, jit_compile=True, reduce_retracing=False)


class JaxAdapter(Adapter):
    name, package, framework = "jax", "posenc_jax", "jax"

    def from_numpy(self, array):
        import jax.numpy as jnp

        if array.dtype.kind in "iu":
            return jnp.asarray(array.astype(np.int32))  # JAX's default integer without x64
        return jnp.asarray(array)

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def dtype(self, name):
        import jax.numpy as jnp

        return getattr(jnp, dtype_name(name))

    def jit(self, fn):
        import jax

        return jax.jit(fn)


ADAPTERS = {a.name: a for a in (NumpyAdapter(), TorchAdapter(), TFAdapter(), JaxAdapter())}


@lru_cache(maxsize=None)
def adapter(name: str) -> Adapter:
    if name not in ADAPTERS:
        raise ValueError(f"backend={name!r} is not one of {list(ADAPTERS)}")
    return ADAPTERS[name]
