"""Sharded-runtime checks: posenc encodings give the same numbers sharded and unsharded.

Two real distributed runtimes, on the host CPUs:
* JAX: a 1-D `Mesh` over 8 host CPU devices (`XLA_FLAGS=--xla_force_host_platform_device_count=8`,
  which must be set before JAX starts, hence a subprocess). q/k are sharded on the sequence axis with
  `NamedSharding`; `apply_rope`, `alibi_bias` and `t5_bias` run under `jax.jit` and must equal the
  unsharded result, keep the sequence sharding, and (RoPE) compile to HLO without collectives that
  move sequence data. The per-rank form runs under `shard_map` with `cp_positions`/`cp_indices`
  and `rank = lax.axis_index`.
* PyTorch: `torch.distributed` with the gloo backend, 4 processes (`torch.multiprocessing.spawn`), a
  DTensor sharded on the sequence dimension: `posenc_torch.apply_rope` on each rank's local shard with
  that rank's `cp_positions` (contiguous, striped, zigzag) or, for a packed row, the positions of its
  `cp_indices`, gathered (`DTensor.full_tensor`, an all-gather) and put back in sequence order
  (`cp_unshard`), equals the unsharded result.

`run_distributed()` starts each runtime in a fresh Python process (`python -m posenc.check.distributed
jax|torch`), which prints one JSON record per check; `posenc check --distributed` and
tests/backends/test_distributed.py call it. The frameworks are imported only inside those processes, by
the runtime modules `jax_runtime` and `torch_runtime` (distributed runtimes are framework code by nature);
this module and `common` import only NumPy.

Results are compared with the float64 spec's tolerance policy; the sharded and unsharded runs execute
the same float32 operations on the same values, so the measured difference is 0.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

from ..record import Record
from .common import (
    DATA_COLLECTIVES,
    JAX_DEVICES,
    MROPE_CONVENTIONS,
    RUNTIMES,
    STRATEGIES,
    TORCH_WORLD,
    mrope_ids,
    record,
)

__all__ = ["run_distributed", "as_records", "mrope_ids", "main", "RUNTIMES", "JAX_DEVICES", "TORCH_WORLD",
           "STRATEGIES", "MROPE_CONVENTIONS", "DATA_COLLECTIVES"]


_ENCODINGS = {"rope": "apply_rope", "mrope": "apply_rope", "alibi": "alibi_bias", "t5": "t5_bias"}


def as_records(records) -> list:
    """The records of `run_distributed` as the suite's `record.Record`s, for `posenc check`'s JSON and
    Markdown reports: family "distributed", backend = the runtime ("jax", "torch"), case = the check's
    name, convention = the multi-axis convention of an `mrope-*` check, else its encoding's family;
    float32, mode "jit" (JAX) or "eager" (torch). The collectives found in the HLO go into `message`."""

    out = []
    for r in records:
        prefix = r["check"].split("-")[0]
        convention = next((c for c in MROPE_CONVENTIONS if r["check"].startswith(f"mrope-{c}-")), prefix)
        err, tol = r.get("max_abs_err"), r.get("tol")
        notes = [r["message"]] if r.get("message") else []
        if "collectives" in r:
            moved = {op: n for op, n in r["collectives"].items() if n}
            shapes = f" ({', '.join(r.get('all_reduce_shapes', []))})" if r.get("all_reduce_shapes") else ""
            notes.append("collectives: " + (", ".join(f"{op} x{n}" for op, n in moved.items()) + shapes
                                            if moved else "none"))
        if r["runtime"] == "torch" and "world_size" in r:
            notes.append(f"torch.distributed {r.get('backend', 'gloo')} x {r['world_size']}")
        out.append(Record(encoding=_ENCODINGS.get(prefix, r["check"]), family="distributed", convention=convention,
                          case=r["check"], backend=r["runtime"], dtype="float32",
                          mode="jit" if r["runtime"] == "jax" else "eager", status=r["status"], max_abs_err=err,
                          err_in_tol=None if err is None or not tol else err / tol, tol=tol,
                          tol_why="float32 tolerance of the unsharded result (posenc_np.testing.tolerance)"
                          if tol is not None else "", message="; ".join(notes),
                          description="sharded result equals the unsharded one (posenc.check.distributed)"))
    return out


def run_distributed(runtimes=RUNTIMES, *, timeout=300) -> list[dict]:
    """Run each runtime's checks in a fresh process; a runtime that is not installed is a "skip"
    record, one that crashes an "error" record."""
    records = []
    for runtime in runtimes:
        if importlib.util.find_spec(runtime) is None:
            records.append(record(f"{runtime}-runtime", runtime, False, message="not installed") | {"status": "skip"})
            continue
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run([sys.executable, "-m", "posenc.check.distributed", runtime], capture_output=True,
                              text=True, timeout=timeout, env=env)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode or not lines:
            records.append(record(f"{runtime}-runtime", runtime, False, message=(proc.stderr or proc.stdout)[-2000:])
                           | {"status": "error"})
            continue
        records.extend(json.loads(line) for line in lines)
    return records


def main(argv=None) -> int:
    runtime = (argv or sys.argv[1:] or ["jax"])[0]
    if runtime == "jax":
        # must precede the first import of jax in this process
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={JAX_DEVICES}".strip()
        from .jax_runtime import checks
    elif runtime == "torch":
        from .torch_runtime import checks
    else:
        print(f"unknown runtime {runtime!r}: choose jax or torch", file=sys.stderr)
        return 2
    records = checks()
    for line in records:
        print(json.dumps(line))
    return 0 if all(r["status"] == "pass" for r in records) else 1
