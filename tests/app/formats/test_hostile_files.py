"""Hostile SOURCE files for `posenc port`: truncated and corrupted safetensors / npz / .weights.h5 / msgpack /
GGUF headers, header lengths that point past the file, tensor shapes whose byte size overflows, pickles that
would run code. Each must be rejected with one message and exit 2, without a memory blow-up and without
running the pickle's code.

All files go through ONE child process (`posenc.cli.main(["port", FILE, OUT])` per file) under RLIMIT_AS
(4 GiB: an allocation sized from a hostile header fails instead of taking the machine); the child reports
each exit status and message and how far its peak RSS (`ru_maxrss`) grew over its baseline with every
reader's library imported, which must stay under `RSS_BOUND_MIB` (512 MiB; a 16-EiB shape read as a real
size would be far beyond it).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

# growth of the peak RSS over the child's baseline with every reader's library imported: a hostile header that
# made a reader allocate what it claims (GiBs) would pass it by far; the libraries themselves (torch, TF via
# h5py users, flax) weigh 1-1.5 GiB and depend on what else is installed, so they are the baseline.
RSS_BOUND_MIB = 512


def _safetensors_bytes():
    from safetensors.numpy import save

    return save({"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float16)})


def _st_with_header(header: dict, data: bytes = b"\0" * 16) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _npy_header(shape, descr="<f4"):
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    body = repr(header).encode()
    body += b" " * (63 - (10 + len(body)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _gguf(n_tensors=1, n_kv=0, tail=b""):
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + tail


class _Evil:
    """Pickles as a call of os.system: any unpickler that honours it runs the shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hostile_files(directory, marker):
    """name -> path of each hostile file (written into `directory`)."""
    good = _safetensors_bytes()
    (size,) = struct.unpack("<Q", good[:8])
    files = {
        "safetensors: 4 bytes": ("st1.safetensors", good[:4]),
        "safetensors: cut in the header": ("st2.safetensors", good[: 8 + size // 2]),
        "safetensors: cut in the data": ("st3.safetensors", good[:-10]),
        "safetensors: header length 2**60": ("st4.safetensors", struct.pack("<Q", 2**60) + good[8:]),
        "safetensors: header length past the file": ("st5.safetensors", struct.pack("<Q", len(good)) + good[8:]),
        "safetensors: header not JSON": ("st6.safetensors", struct.pack("<Q", 16) + b"\xff" * 16 + b"\0" * 16),
        "safetensors: offsets past the file": ("st7.safetensors", _st_with_header(
            {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1 << 40]}})),
        "safetensors: shape overflows int64": ("st8.safetensors", _st_with_header(
            {"a": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 16]}})),
        "safetensors: negative dim": ("st9.safetensors", _st_with_header(
            {"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})),
        "safetensors: begin > end": ("st10.safetensors", _st_with_header(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})),
        "npz: truncated zip": ("n1.npz", None),
        "npz: shape overflows": ("n2.npz", None),
        "npz: shape past the data": ("n3.npz", None),
        "npz: object array (pickle)": ("n4.npz", None),
        "h5: truncated": ("h1.weights.h5", None),
        "h5: signature then garbage": ("h2.weights.h5", b"\x89HDF\r\n\x1a\n" + b"\xff" * 512),
        "msgpack: truncated": ("m1.msgpack", None),
        "msgpack: str32 of 4 GiB": ("m2.msgpack", b"\x81\xa1a\xdb\xff\xff\xff\xff" + b"x" * 8),
        "msgpack: ndarray ext with a huge shape": ("m3.msgpack", None),
        "msgpack: garbage": ("m4.msgpack", b"\xc1" * 64),
        "gguf: truncated": ("g1.gguf", b"GGUF\x03\x00"),
        "gguf: 2**62 tensors": ("g2.gguf", _gguf(n_tensors=2**62)),
        "gguf: 2**62 key-values": ("g3.gguf", _gguf(n_tensors=0, n_kv=2**62)),
        "gguf: key of 2**60 bytes": ("g4.gguf", _gguf(n_tensors=0, n_kv=1, tail=struct.pack("<Q", 2**60) + b"k")),
        "gguf: tensor dims overflow": ("g5.gguf", _gguf(n_tensors=1, n_kv=0, tail=struct.pack("<Q", 1) + b"t"
                                                        + struct.pack("<I", 2) + struct.pack("<QQ", 2**62, 2**62)
                                                        + struct.pack("<IQ", 0, 0))),
        "pt: pickle that runs os.system (zip)": ("p1.pt", None),
        "pt: pickle that runs os.system (legacy)": ("p2.pt", None),
    }
    paths = {}
    for name, (filename, data) in files.items():
        path = os.path.join(directory, filename)
        if data is not None:
            with open(path, "wb") as handle:
                handle.write(data)
        paths[name] = path
    ok = os.path.join(directory, "ok.npz")
    np.savez(ok, a=np.arange(64, dtype=np.float32))
    open(paths["npz: truncated zip"], "wb").write(open(ok, "rb").read()[:100])
    _zip(paths["npz: shape overflows"], {"a.npy": _npy_header((2**62, 2**62)) + b"\0" * 16})
    _zip(paths["npz: shape past the data"], {"a.npy": _npy_header((1 << 30,)) + b"\0" * 16})
    _zip(paths["npz: object array (pickle)"], {"a.npy": _npy_header((1,), "|O") + b"\x80\x04N."})
    os.unlink(ok)
    import h5py

    ok = os.path.join(directory, "ok.weights.h5")
    with h5py.File(ok, "w") as handle:
        handle["layers/dense/vars/0"] = np.ones((64, 64), np.float32)
    open(paths["h5: truncated"], "wb").write(open(ok, "rb").read()[:1000])
    os.unlink(ok)
    from flax import serialization

    good_msgpack = serialization.msgpack_serialize({"a": np.ones((8, 8), np.float32)})
    open(paths["msgpack: truncated"], "wb").write(good_msgpack[: len(good_msgpack) // 2])
    # flax's ndarray ext (code 1): msgpack of (shape, dtype name, buffer) with a shape far beyond the buffer
    import msgpack

    payload = msgpack.packb(((2**40, 2**40), "float32", b"\0" * 16))
    open(paths["msgpack: ndarray ext with a huge shape"], "wb").write(
        msgpack.packb({"a": msgpack.ExtType(1, payload)}))
    import torch

    torch.save({"w": _Evil(marker)}, paths["pt: pickle that runs os.system (zip)"])
    torch.save({"w": _Evil(marker)}, paths["pt: pickle that runs os.system (legacy)"],
               _use_new_zipfile_serialization=False)
    return paths


_CHILD = r"""
import contextlib, importlib, io, json, resource, sys
from posenc import cli
for library in ("torch", "h5py", "safetensors.numpy", "gguf", "flax.serialization", "msgpack"):
    with contextlib.suppress(ImportError):
        importlib.import_module(library)
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
results = {}
for name, path in json.loads(sys.argv[1]).items():
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = cli.main(["port", path, sys.argv[2]])
        except SystemExit as exit:
            rc = exit.code
        except BaseException as error:
            rc, err = "raised", io.StringIO(f"{type(error).__name__}: {error}")
    results[name] = {"rc": rc, "err": err.getvalue(), "out": out.getvalue(),
                     "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline}
print(json.dumps(results))
"""


def _limit_address_space():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hostile")
    marker = os.path.join(directory, "CODE-WAS-EXECUTED")
    paths = hostile_files(str(directory), marker)
    target = os.path.join(directory, "out.safetensors")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(paths), target], capture_output=True, text=True,
                          env=env, timeout=300, preexec_fn=_limit_address_space)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return results, marker, target, directory


CASES = ["safetensors: 4 bytes", "safetensors: cut in the header", "safetensors: cut in the data",
         "safetensors: header length 2**60", "safetensors: header length past the file", "safetensors: header not JSON",
         "safetensors: offsets past the file", "safetensors: shape overflows int64", "safetensors: negative dim",
         "safetensors: begin > end", "npz: truncated zip", "npz: shape overflows", "npz: shape past the data",
         "npz: object array (pickle)", "h5: truncated", "h5: signature then garbage", "msgpack: truncated",
         "msgpack: str32 of 4 GiB", "msgpack: ndarray ext with a huge shape", "msgpack: garbage", "gguf: truncated",
         "gguf: 2**62 tensors", "gguf: 2**62 key-values", "gguf: key of 2**60 bytes", "gguf: tensor dims overflow",
         "pt: pickle that runs os.system (zip)", "pt: pickle that runs os.system (legacy)"]


@pytest.mark.parametrize("case", CASES)
def test_hostile_file_is_rejected_with_one_message(outcomes, case):
    results, marker, target, directory = outcomes
    result = results[case]
    assert result["rc"] == 2, result
    assert "Traceback" not in result["err"] + result["out"], result["err"]
    assert len(result["err"].strip().splitlines()) == 1, result["err"]
    assert not os.path.exists(target)


def test_no_pickled_code_ran_and_memory_stayed_bounded(outcomes):
    results, marker, target, directory = outcomes
    assert not os.path.exists(marker), "a pickle's code was executed"
    assert sorted(results) == sorted(CASES)
    peak = max(r["rss_mib"] for r in results.values())
    print(f"{len(results)} hostile files, peak RSS growth over the imported readers {peak:.0f} MiB")
    assert peak < RSS_BOUND_MIB, {k: round(v["rss_mib"]) for k, v in results.items()}
    assert not [n for n in os.listdir(directory) if n.startswith(".posenc-")]
