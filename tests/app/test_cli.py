"""`posenc check` as a user sees it: exit codes, filters, reports, and planted porting mismatches."""

from __future__ import annotations

import json

import pytest

from posenc.cli import main
from posenc import adapters as suite_backends

FAST = ["--mode", "eager", "--quiet"]


def test_check_passes_and_writes_reports(tmp_path, capsys):
    report, table = tmp_path / "r.json", tmp_path / "r.md"
    code = main(["check", "--encoding", "learned,resize", "--backend", "jax", *FAST, "--json", str(report),
                 "--markdown", str(table)])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads(report.read_text())
    assert data["records"] and all(r["status"] == "pass" for r in data["records"])
    record = data["records"][0]
    assert {"encoding", "convention", "backend", "dtype", "mode", "max_abs_err", "tol", "status"} <= set(record)
    assert {r["family"] for r in data["records"]} == {"learned", "resize"}
    assert "| family |" in table.read_text()
    assert out.strip().splitlines()[-2].endswith("0 failed, 0 skipped")


@pytest.mark.parametrize("argv, name", [
    (["--encoding", "sinusiodal"], "sinusiodal"),
    (["--backend", "mxnet"], "mxnet"),
    (["--dtype", "float8"], "float8"),
    (["--mode", "graph"], "graph"),
])
def test_unknown_filter_is_bad_usage(argv, name, capsys):
    assert main(["check", *argv]) == 2
    assert name in capsys.readouterr().err


def test_unwritable_report_path_is_bad_usage(tmp_path, capsys):
    assert main(["check", "--encoding", "learned", "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_backend_is_skipped_unless_required(monkeypatch, capsys):
    monkeypatch.setattr(suite_backends.TFAdapter, "available", lambda self: False)
    assert main(["check", "--encoding", "learned", "--backend", "tf", *FAST]) == 0
    assert "skipped" in capsys.readouterr().out
    assert main(["check", "--encoding", "learned", "--backend", "tf", "--require", "tf", *FAST]) == 1


# --- planted mismatches: each known porting bug, put into one backend at run time, turns the run red ---

def _swap_layout(module):
    original = module.sinusoidal

    def planted(positions, dim, *, layout="interleaved", **kwargs):
        return original(positions, dim, layout="concat" if layout == "interleaved" else "interleaved", **kwargs)
    return "sinusoidal", planted


def _t2t_denominator(module):
    original = module.sinusoidal

    def planted(positions, dim, *, denominator="dim", **kwargs):
        return original(positions, dim, denominator="half-1" if denominator == "dim" else "dim", **kwargs)
    return "sinusoidal", planted


def _sin_cos_order(module):
    original = module.sinusoidal

    def planted(positions, dim, **kwargs):
        table = original(positions, dim, **kwargs)
        half = dim // 2
        if kwargs.get("layout", "interleaved") == "concat":
            return _concat(module, table[..., half:], table[..., :half])
        return _concat(module, table[..., 1::2], table[..., 0::2])  # cos first: also changes the layout
    return "sinusoidal", planted


def _concat(module, a, b):
    name = module.__name__
    if name == "posenc_torch":
        import torch
        return torch.cat([a, b], -1)
    if name == "posenc_tf":
        import tensorflow as tf
        return tf.concat([a, b], -1)
    import jax.numpy as jnp
    return jnp.concatenate([a, b], -1)


def _fairseq_offset(module):
    original = module.learned

    def planted(table, positions):  # a port that forgot RoBERTa's two extra rows
        return original(table, positions - 2 if hasattr(positions, "__sub__") else positions)
    return "learned", planted


def _bf16_positions(module):
    original = module.sinusoidal

    def planted(positions, dim, **kwargs):  # positions rounded to the compute dtype, as keras-hub does
        name = module.__name__
        if name == "posenc_torch":
            import torch
            positions = positions.to(torch.bfloat16)
        elif name == "posenc_tf":
            import tensorflow as tf
            positions = tf.cast(tf.cast(positions, tf.bfloat16), tf.float32)
        else:
            import jax.numpy as jnp
            positions = positions.astype(jnp.bfloat16)
        return original(positions, dim, **kwargs)
    return "sinusoidal", planted


def _ops(module):
    """transpose / reshape for the backend under test (the plants below are written once for all three)."""
    name = module.__name__
    if name == "posenc_torch":
        return (lambda t: t.T), (lambda t, shape: t.reshape(shape))
    if name == "posenc_tf":
        import tensorflow as tf
        return tf.transpose, tf.reshape
    import jax.numpy as jnp
    return jnp.transpose, jnp.reshape


def _swap_rope_layout(module):
    original = module.apply_rope

    def planted(x, positions, *, layout="half", **kwargs):  # a Meta checkpoint run with HF's rotate_half
        return original(x, positions, layout="interleaved" if layout == "half" else "half", **kwargs)
    return "apply_rope", planted


def _t5_table_transposed(module):
    original = module.t5_bias
    transpose, reshape = _ops(module)

    def planted(table, *args, **kwargs):  # a t5x [heads, buckets] table loaded by reshape, not transpose
        return original(reshape(transpose(table), tuple(table.shape)), *args, **kwargs)
    return "t5_bias", planted


def _bloom_alibi_everywhere(module):
    original = module.alibi_bias

    def planted(num_heads, q_positions, k_positions, *, form="symmetric", **kwargs):
        return original(num_heads, q_positions, k_positions, form="bloom", **kwargs)  # m*j without a mask
    return "alibi_bias", planted


def _yarn_truncate_flipped(module):
    original = module.apply_rope

    def planted(x, positions, *, scaling=None, **kwargs):  # keras-hub/gpt-oss truncate=False vs HF's True
        if scaling and scaling.get("rope_type", scaling.get("type")) == "yarn":
            scaling = {**scaling, "truncate": not scaling.get("truncate", True)}
        return original(x, positions, scaling=scaling, **kwargs)
    return "apply_rope", planted


PLANTS = {
    "swapped sinusoid layout": (_swap_layout, "sinusoidal"),
    "tensor2tensor vs paper denominator": (_t2t_denominator, "sinusoidal"),
    "sin/cos order": (_sin_cos_order, "sinusoidal"),
    "fairseq/roberta offset": (_fairseq_offset, "learned"),
    "bf16 positions": (_bf16_positions, "sinusoidal"),
    "swapped RoPE layout": (_swap_rope_layout, "hf-llama"),
    "transposed T5 table": (_t5_table_transposed, "t5"),
    "BLOOM ALiBi without a causal mask": (_bloom_alibi_everywhere, "alibi"),
    "YaRN truncate": (_yarn_truncate_flipped, "rope"),
}


@pytest.mark.parametrize("plant", list(PLANTS))
@pytest.mark.parametrize("backend_name", ["torch", "tf", "jax"])
def test_planted_mismatch_turns_the_run_red(plant, backend_name, monkeypatch, capsys):
    adapter = suite_backends.adapter(backend_name)
    if not adapter.available():
        pytest.skip(f"{backend_name} not installed")
    make, family = PLANTS[plant]
    name, planted = make(adapter.module)
    monkeypatch.setattr(adapter.module, name, planted)
    code = main(["check", "--encoding", family, "--backend", backend_name, "--dtype", "float32", *FAST, "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 1, out
    failures = out.split("PASSED")[0]
    assert family in failures and backend_name in failures
