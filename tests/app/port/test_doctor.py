"""`posenc doctor A B`: each catalogued mismatch is named; unrelated data is not explained; bad input exits 2.

Every pair is built from the spec (posenc_np) so the expected mismatch is known by construction.
"""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from posenc import cli as port_cli
from posenc_np import permute_qk_rows, rope_cos_sin, sinusoidal

P = np.arange(64)
DIM = 32


def _concat_swapped():
    table = sinusoidal(P, DIM, layout="concat")
    return np.concatenate([table[:, DIM // 2:], table[:, :DIM // 2]], -1)


def _pairs():
    rng = np.random.default_rng(0)
    vaswani = sinusoidal(P, DIM)
    w = rng.standard_normal((64, 48))
    rope = rope_cos_sin(P, DIM)[0]
    relative = rng.standard_normal((31, 8))
    return {
        "identical": (vaswani, vaswani.copy(), "identical"),
        "float32 copy": (vaswani, vaswani.astype(np.float32), "identical"),
        "sinusoid layout": (vaswani, sinusoidal(P, DIM, layout="concat"), "layout"),
        "rope cos layout": (rope_cos_sin(P, DIM, layout="interleaved")[0], rope, "layout"),
        "denominator": (vaswani, sinusoidal(P, DIM, denominator="half-1"), "denominator"),
        "offset": (sinusoidal(P, DIM), sinusoidal(P + 2, DIM), "offset"),
        "roberta rows": (np.vstack([np.zeros((2, 8)), relative[:20]]), relative[:20], "offset"),
        "sin cos order": (sinusoidal(P, DIM, layout="concat"), _concat_swapped(), "sin-cos-order"),
        "transpose": (w, w.T.copy(), "transpose"),
        "sign": (w, -w, "sign"),
        "reversal": (relative, relative[::-1].copy(), "reversal"),
        "bfloat16": (vaswani.astype(np.float32), vaswani.astype(ml_dtypes.bfloat16), "dtype"),
        "float16": (vaswani, vaswani.astype(np.float16), "dtype"),
        "rope rows": (w, permute_qk_rows(w, 4, source="interleaved", target="half"), "rope-rows"),
        "rope rows back": (w, permute_qk_rows(w, 2, source="half", target="interleaved"), "rope-rows"),
        "linear scaling": (rope, rope_cos_sin(P, DIM, scaling={"rope_type": "linear", "factor": 4.0})[0], "scaling"),
        "base": (rope, rope_cos_sin(P, DIM, base=500000.0)[0], "base"),
        "float32 scaling": (rope.astype(np.float32), rope_cos_sin(P, DIM, dtype="float32", scaling={
            "rope_type": "linear", "factor": 2.0})[0], "scaling"),
    }


def _save(path, array):
    if path.suffix == ".safetensors":
        from safetensors.numpy import save_file

        save_file({"table": np.ascontiguousarray(array)}, str(path))
    else:
        np.save(path, array)


@pytest.mark.parametrize("case", list(_pairs()))
def test_named_mismatch(tmp_path, capsys, case):
    a, b, expected = _pairs()[case]
    # bfloat16 travels in safetensors (.npy cannot hold it); the rest alternate formats
    suffix = ".safetensors" if "bfloat16" in (a.dtype.name, b.dtype.name) or len(case) % 2 else ".npy"
    _save(tmp_path / f"a{suffix}", a)
    _save(tmp_path / f"b{suffix}", b)
    status = port_cli.main(["doctor", str(tmp_path / f"a{suffix}"), str(tmp_path / f"b{suffix}"),
                            "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "d.json").read_text())
    assert status == 0, out
    assert report["mismatch"] == expected, out
    assert report["explained"]


def test_scaling_factor_and_offset_values(tmp_path):
    from posenc.port.doctor import diagnose

    pairs = _pairs()
    assert diagnose(*pairs["linear scaling"][:2]).details["factor"] == pytest.approx(4.0, rel=1e-6)
    assert diagnose(*pairs["offset"][:2]).details["offset"] == 2
    assert diagnose(*pairs["roberta rows"][:2]).details["offset"] == 2
    assert diagnose(*pairs["rope rows"][:2]).details["head_dim"] == 16
    assert diagnose(*pairs["denominator"][:2]).details["B"]["denominator"] == "half-1"


@pytest.mark.parametrize("b", ["random", "shifted", "two changes"])
def test_unexplained_difference_exits_1(tmp_path, capsys, b):
    a = sinusoidal(P, DIM)
    other = {"random": np.random.default_rng(1).standard_normal(a.shape), "shifted": a + 0.01,
             "two changes": -sinusoidal(P, DIM, layout="concat", denominator="half-1").T}[b]
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", other)
    assert port_cli.main(["doctor", str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]) == 1
    assert "no known mismatch" in capsys.readouterr().out


def test_bad_input_exits_2(tmp_path, capsys):
    from safetensors.numpy import save_file

    good = tmp_path / "a.npy"
    np.save(good, np.zeros((4, 4)))
    np.save(tmp_path / "obj.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "ints.npy", np.arange(4))
    save_file({"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}, str(tmp_path / "two.safetensors"))
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    for other, needle in (("missing.npy", "does not exist"), ("obj.npy", "cannot read"), ("ints.npy", "int64"),
                          ("two.safetensors", "holds 2 tensors"), ("junk.npy", "cannot read"),
                          ("a.txt", "does not exist")):
        assert port_cli.main(["doctor", str(good), str(tmp_path / other)]) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err
