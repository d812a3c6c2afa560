"""`port()`: plan, write atomically, verify, then commit (or keep aside as unverified)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from posenc_np.rope import rope_frequencies, rope_plan

from ..errors import UsageError
from ..formats import DIRECTORY_FORMATS, detect_format, open_reader, write_checkpoint
from ..formats.base import nbytes
from ..formats.shards import write_shards
from ..io import (
    atomic_output,
    check_output,
    file_mode,
    remove_stale_temporaries,
    target_lock,
    temp_prefix,
    write_atomic,
)
from .checks import Check, verify_plan
from .mapping import build_plan
from .stacks import pack_entries, verify_stack

__all__ = ["port", "PortResult", "UNVERIFIED_SUFFIX", "report_text", "write_json"]

UNVERIFIED_SUFFIX = ".unverified"
# the framework whose backend recomputes the encodings on a target of each format
FRAMEWORK_OF = {"safetensors": "torch", "safetensors-dir": "torch", "pt": "torch", "keras-h5": "tf", "msgpack": "jax",
                "npz": None, "gguf": None}
#: save_pretrained's default shard limit (transformers 5.x `max_shard_size="50GB"`) for a directory TARGET
DEFAULT_MAX_SHARD_SIZE = 50 * 10**9


@dataclass
class PortResult:
    source: str
    target: str
    written: str | None          # TARGET, TARGET.unverified, or None
    verified: bool
    entries: list
    checks: list = field(default_factory=list)
    sidecar: str | None = None
    rope: dict | None = None     # the RoPE settings the logits check rotated with

    def as_dict(self):
        return {"source": self.source, "target": self.target, "written": self.written, "verified": self.verified,
                "tensors": [{"target": e.target, "source": e.source, "shape": list(e.shape), "dtype": e.dtype,
                             "conversions": [str(op) for op in e.ops]} for e in self.entries],
                "checks": [c.as_dict() for c in self.checks], "sidecar": self.sidecar, "rope": self.rope,
                "max_err_in_tol": max((c.max_abs_err / c.atol if c.atol else (0.0 if c.max_abs_err == 0 else
                                       float("inf")) for c in self.checks), default=0.0)}


def _same_file(a, b):
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    return os.path.exists(b) and os.path.samefile(a, b)


def _check_directory_target(target):
    directory = os.path.abspath(target)
    parent = os.path.dirname(directory)
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write TARGET {target!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"cannot write TARGET {target!r}: directory {parent!r} is not writable")
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"cannot write TARGET {target!r}: it exists and is not a directory")
    if os.path.isdir(directory) and os.listdir(directory):
        raise UsageError(f"cannot write TARGET {target!r}: it is a directory that is not empty (a checkpoint "
                         "directory is written whole, never into an existing one)")


def _total_bytes(entries):
    return sum(nbytes(e.shape, e.dtype) for e in entries)


def _target_format(target, preset_format) -> str:
    """TARGET's format: its name's, or for a preset that writes a directory (mlx-lm's) a name without a file
    suffix taken as that directory, with or without a trailing `/`, as users name directories."""
    if preset_format in DIRECTORY_FORMATS:  # a training stack's checkpoint directory (posenc.port.stacks)
        try:
            named = detect_format(target)
        except UsageError:
            return preset_format  # a name without a file suffix: the directory, as given
        return preset_format if named in ("safetensors-dir", *DIRECTORY_FORMATS) else named
    try:
        return detect_format(target)
    except UsageError:
        if preset_format == "safetensors-dir":
            return "safetensors-dir"
        raise


def port(source, target, rules, *, rope=None, sidecar=None, extra=(), metadata=None, target_format=None,
         seed=0, max_shard_size=None, layout=None, stack_config=None) -> PortResult:
    """Convert SOURCE into TARGET by `rules` (`mapping.Rules`), verify, and write TARGET only if verified.

    A failed verification keeps the written file as `TARGET.unverified` (TARGET itself is not touched)
    so the numbers can be inspected; every UsageError leaves nothing behind. A TARGET ending in `/` is a
    Hugging Face checkpoint directory (shards above `max_shard_size` bytes, else one model.safetensors;
    the preset's `hf_config` as config.json); a `.safetensors` TARGET above `max_shard_size` becomes
    `NAME-0000i-of-0000n.safetensors` shards and `NAME.safetensors.index.json` beside it. Either is
    written into a temporary directory first: a directory TARGET appears by one rename, loose shards
    are renamed into place before their index, so a loader never finds an index with missing shards.

    A training stack's `layout` (posenc.port.stacks): a stack SOURCE is read through its canonical view
    (`layout.unpack`); a stack TARGET (`target_format` in DIRECTORY_FORMATS) is written by `stacks.port_stack`
    with `stack_config` beside the tensors.
    """
    source, target = str(source), str(target)
    reader = open_reader(source)
    if layout is not None and target_format not in DIRECTORY_FORMATS:
        reader = layout.unpack(reader)
    fmt = _target_format(target, target_format)
    if fmt == "safetensors-index":
        raise UsageError(f"TARGET {target!r}: write a checkpoint directory (a name ending in /) or a .safetensors "
                         "file with --max-shard-size; the index is written with the shards")
    if fmt == "safetensors-dir" or fmt in DIRECTORY_FORMATS:
        _check_directory_target(target)
    else:
        if _same_file(source, target):
            raise UsageError(f"TARGET {target!r} is SOURCE: posenc never overwrites its input")
        check_output(target, what="TARGET")
    if target_format and fmt != target_format and not (target_format == "safetensors" and fmt == "safetensors-dir"):
        raise UsageError(f"this preset writes {target_format}; TARGET {target!r} names {fmt}")
    entries = build_plan(reader, rules)
    if rope is not None:
        rope = _check_rope(rope, entries, sidecar)
    if fmt in DIRECTORY_FORMATS:
        return _port_stack(source, target, reader, entries, layout, stack_config, rope, sidecar, extra, seed)
    limit = max_shard_size or (DEFAULT_MAX_SHARD_SIZE if fmt == "safetensors-dir" else None)
    if fmt == "safetensors-dir" or (fmt == "safetensors" and limit and _total_bytes(entries) > limit):
        return _port_sharded(source, target, reader, entries, rope, sidecar, extra, metadata, seed, fmt, limit)
    with atomic_output(target, what="TARGET") as tmp:
        try:
            write_checkpoint(tmp.path, fmt, [(e.target, e.shape, e.dtype, lambda e=e: e.produce(reader))
                                            for e in entries], metadata)
        except (ValueError, TypeError, OSError, RuntimeError) as error:  # h5py, torch.save: I/O errors are RuntimeError
            raise UsageError(f"cannot write {target!r}: {type(error).__name__}: {error}") from None
        written = open_reader(tmp.path, fmt)
        verify = _guarded(lambda src, tgt: verify_plan(entries, src, tgt, rope=rope, seed=seed,
                                                       framework=FRAMEWORK_OF[fmt],
                                                       extra=[_guarded(fn) for fn in extra]))
        checks = verify(reader, written)
        verified = bool(checks) and all(c.passed for c in checks)
        final = target if verified else target + UNVERIFIED_SUFFIX
        tmp.commit(final)
    sidecar_path = None
    if sidecar is not None:
        sidecar_path = final + ".rope.json"
        write_json(sidecar_path, sidecar)
    return PortResult(source, target, final, verified, entries, checks, sidecar_path, rope)


def _port_sharded(source, target, reader, entries, rope, sidecar, extra, metadata, seed, fmt, limit):
    as_directory = fmt == "safetensors-dir"
    target = target.rstrip(os.sep) if as_directory else target
    prefix = "model" if as_directory else os.path.basename(target)[: -len(".safetensors")]
    with _atomic_directory(target) as tmp:
        try:
            thunks = [(e.target, e.shape, e.dtype, lambda e=e: e.produce(reader)) for e in entries]
            files = write_shards(tmp.path, thunks, metadata or {}, limit, prefix=prefix)
        except (ValueError, TypeError, OSError, RuntimeError) as error:  # h5py, torch.save: I/O errors are RuntimeError
            raise UsageError(f"cannot write {target!r}: {type(error).__name__}: {error}") from None
        if as_directory and sidecar and sidecar.get("hf_config"):
            with open(os.path.join(tmp.path, "config.json"), "w") as handle:
                json.dump(sidecar["hf_config"], handle, indent=2, default=_jsonable)
                handle.write("\n")
        written = open_reader(os.path.join(tmp.path, files[-1]))
        verify = _guarded(lambda src, tgt: verify_plan(entries, src, tgt, rope=rope, seed=seed,
                                                       framework=FRAMEWORK_OF[fmt],
                                                       extra=[_guarded(fn) for fn in extra]))
        checks = verify(reader, written)
        verified = bool(checks) and all(c.passed for c in checks)
        if verified and not as_directory and len(files) > 1:
            tmp.commit_files(os.path.dirname(os.path.abspath(target)))
            final = target
        else:
            final = tmp.commit(target if verified else target + UNVERIFIED_SUFFIX)
    sidecar_path = None
    if sidecar is not None:
        sidecar_path = final + ".rope.json"
        write_json(sidecar_path, sidecar)
    return PortResult(source, target, final, verified, entries, checks, sidecar_path, rope)


def _port_stack(source, target, reader, entries, layout, stack_config, rope, sidecar, extra, seed):
    """A training stack's checkpoint directory (posenc.port.stacks): packed tensors and `stack_config` written into a
    temporary sibling directory, verified, then renamed to TARGET (or TARGET.unverified)."""
    packed = pack_entries(entries, reader, layout)
    target = target.rstrip(os.sep)
    with _atomic_directory(target) as tmp:
        try:
            path = layout.write(tmp.path, packed, stack_config)
        except (ValueError, TypeError, OSError, RuntimeError) as error:  # torch.save / orbax / tensorstore errors
            raise UsageError(f"cannot write {target!r}: {type(error).__name__}: {error}") from None
        checks = verify_stack(path, reader, entries, packed, layout, rope, extra, seed, _guarded)
        verified = bool(checks) and all(c.passed for c in checks)
        final = tmp.commit(target if verified else target + UNVERIFIED_SUFFIX)
    sidecar_path = None
    if sidecar is not None:
        sidecar_path = final + ".rope.json"
        write_json(sidecar_path, sidecar)
    return PortResult(source, target, final, verified, entries, checks, sidecar_path, rope)


class _DirectoryOutput:
    def __init__(self, target, path):
        self.target, self.path = target, path

    def _modes(self):
        mode = file_mode()
        for name in os.listdir(self.path):
            os.chmod(os.path.join(self.path, name), mode)
        mask = os.umask(0)  # mkdtemp's 0700 is for the temporary directory only; the result gets mkdir's mode
        os.umask(mask)
        os.chmod(self.path, 0o777 & ~mask)

    def commit(self, final):
        """The whole directory renamed to `final` (one rename: it appears complete or not at all); a single
        `model.safetensors` for a `.safetensors` TARGET is renamed to `final` itself."""
        self._modes()
        names = os.listdir(self.path)
        if not os.path.basename(self.target).endswith(".safetensors") or final.endswith(UNVERIFIED_SUFFIX):
            if os.path.isdir(final) and final.endswith(UNVERIFIED_SUFFIX):
                shutil.rmtree(final)  # an earlier unverified port of the same TARGET
            os.rename(self.path, final)
            return final
        (only,) = names
        os.replace(os.path.join(self.path, only), final)
        return final

    def commit_files(self, directory):
        """Shards renamed into `directory` first, the index last."""
        self._modes()
        names = sorted(os.listdir(self.path), key=lambda n: n.endswith(".index.json"))
        for name in names:
            os.replace(os.path.join(self.path, name), os.path.join(directory, name))
        return directory


@contextmanager
def _atomic_directory(target):
    parent = os.path.dirname(os.path.abspath(target))
    tmp = None
    try:
        with target_lock(target, what="TARGET"):
            remove_stale_temporaries(parent)  # a killed port's directory (posenc/io.py)
            tmp = tempfile.mkdtemp(dir=parent, prefix=temp_prefix("port"))
            yield _DirectoryOutput(target, tmp)
    except OSError as error:
        raise UsageError(f"cannot write TARGET {target!r}: {error.strerror or error}") from error
    finally:
        if tmp is not None and os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _check_rope(rope, entries, sidecar):
    """Validate base/scaling against the head dim now (exit 2), not as a failed check after writing."""
    rope = dict(rope)
    if rope.get("layers") is not None:  # per-layer settings: each entry was validated by rope_schedule_from_hf_config
        return rope
    head_dims = {e.tags["head_dim"] for e in entries if e.tags.get("role") == "q" and "head_dim" in e.tags}
    if rope.get("rotary_dim") is None and len(head_dims) == 1:
        rope["rotary_dim"] = head_dims.pop()
        if sidecar is not None and sidecar.get("rope", {}).get("rotary_dim") is None:
            sidecar["rope"]["rotary_dim"] = rope["rotary_dim"]
    if rope.get("rotary_dim"):
        try:
            rope_frequencies(rope["rotary_dim"], base=rope["base"], scaling=rope["scaling"])
            if rope.get("mrope_section") is not None:
                rope_plan(rope["rotary_dim"], base=rope["base"], scaling=rope["scaling"],
                          mrope_section=rope["mrope_section"], mrope_interleaved=bool(rope.get("mrope_interleaved")))
        except (ValueError, TypeError) as error:
            raise UsageError(f"RoPE settings (base {rope['base']}, scaling {rope['scaling']}): {error}") from None
    return rope


def _guarded(fn):
    """A framework check that cannot run is a failed check with its reason, never a traceback."""
    def run(source, target):
        try:
            return fn(source, target)
        except Exception as error:  # noqa: BLE001 - reported as a failed verification
            return [Check("error", getattr(fn, "__name__", "check"), float("inf"), 0.0, "", False,
                          f"{type(error).__name__}: {error}")]
    return run


def write_json(path, obj, *, what="report"):
    """`obj` as indented JSON (NumPy scalars as numbers), written atomically."""
    write_atomic(path, json.dumps(obj, indent=2, default=_jsonable) + "\n", what=what)


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    return str(value)


def report_text(result: PortResult) -> str:
    """The terminal report: one line per check kind with its worst error, failures in full."""
    lines = [f"posenc port {result.source} -> {result.target}",
             f"  {len(result.entries)} tensors; conversions: " + _conversion_summary(result.entries)]
    kinds = {}
    for check in result.checks:
        kinds.setdefault(check.kind, []).append(check)
    for kind, checks in kinds.items():
        worst = max(checks, key=lambda c: (not c.passed, c.max_abs_err / c.atol if c.atol else c.max_abs_err))
        failed = sum(not c.passed for c in checks)
        status = "ok  " if not failed else "FAIL"
        note = f" - {worst.note}" if worst.note else ""
        lines.append(f"  {status} {kind:<12} {len(checks) - failed}/{len(checks)} passed; worst {worst.name}: "
                     f"max |err| {worst.max_abs_err:.3g} (tol {worst.atol:.3g}){note}")
        for check in checks:
            if not check.passed and check is not worst:
                lines.append(f"       {check.name}: max |err| {check.max_abs_err:.3g} (tol {check.atol:.3g}) "
                             f"{check.note}")
    if result.verified:
        lines.append(f"verified: wrote {result.written}" + (f" and {result.sidecar}" if result.sidecar else ""))
    else:
        lines.append(f"NOT verified: output kept aside as {result.written}; {result.target} was not written")
    return "\n".join(lines)


def _conversion_summary(entries):
    counts = {}
    for entry in entries:
        for op in entry.ops:
            if op.kind != "rows":
                counts[op.kind] = counts.get(op.kind, 0) + 1
    plain = sum(1 for e in entries if not [op for op in e.ops if op.kind != "rows"])
    parts = [f"{k} x{n}" for k, n in counts.items()] + [f"unchanged x{plain}"]
    return ", ".join(parts)
