"""`posenc check` as a user sees it: exit codes, filters, reports, and planted porting mismatches."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import FAST
from posenc import adapters, quiet
from posenc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_check_passes_and_writes_reports(tmp_path, capsys):
    report, table = tmp_path / "r.json", tmp_path / "r.md"
    saved = os.umask(0o022)
    try:
        code = main(["check", "--encoding", "learned,resize", "--backend", "jax", *FAST, "--json", str(report),
                     "--markdown", str(table)])
    finally:
        os.umask(saved)
    out = capsys.readouterr().out
    assert code == 0, out
    # an ordinary file, as port --json, experiment --json and plot write it (posenc.io.write_atomic)
    assert stat.S_IMODE(report.stat().st_mode) == stat.S_IMODE(table.stat().st_mode) == 0o644
    data = json.loads(report.read_text())
    assert data["records"] and all(r["status"] == "pass" for r in data["records"])
    record = data["records"][0]
    assert {"encoding", "convention", "backend", "dtype", "mode", "max_abs_err", "tol", "status"} <= set(record)
    assert {r["family"] for r in data["records"]} == {"learned", "resize"}
    assert "| family |" in table.read_text()
    assert out.strip().splitlines()[-1] == data["summary_line"] == f"{len(data['records'])} passed, 0 failed, 0 skipped"


@pytest.mark.parametrize("argv, name", [
    (["--encoding", "sinusiodal"], "sinusiodal"),
    (["--backend", "mxnet"], "mxnet"),
    (["--dtype", "float8"], "float8"),
    (["--mode", "graph"], "graph"),
])
def test_unknown_filter_is_bad_usage(argv, name, capsys):
    assert main(["check", *argv]) == 2
    assert name in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["--encoding", "alibi-forms", "--dtype", "bfloat16"], "--encoding alibi-forms with --dtype bfloat16 selects "
                                                          "nothing: its cases run in dtypes float32 only"),
    (["--encoding", ",", "--backend", "tf"], "--encoding ',' names nothing"),
])
def test_empty_selection_is_bad_usage(argv, needle, capsys):
    """A selection must never pass by running nothing (it printed "0 passed, 0 failed" and exited 0)."""
    assert main(["check", *argv, *FAST]) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and "passed" not in captured.out


def test_select_names_the_filter_that_selected_nothing():
    from posenc.check.command import select
    from posenc.check.registry import Case
    from posenc.errors import UsageError

    eager_only = Case("sinusoidal", "vaswani", "short", make=None, tol=None, modes=("eager",))
    assert select([eager_only], encodings=["vaswani"], dtypes=["float16"], modes=["eager", "jit"]) == [eager_only]
    with pytest.raises(UsageError, match="--encoding vaswani with --mode jit selects nothing: its cases run in "
                                         "modes eager only"):
        select([eager_only], encodings=["vaswani"], dtypes=["float32"], modes=["jit"])
    with pytest.raises(UsageError, match="--encoding rope has no registered case"):
        select([eager_only], encodings=["rope"])


def test_torch_compile_backend_is_passed_down_never_through_the_environment(monkeypatch, capsys):
    torch = adapters.adapter("torch")
    if not torch.available():
        pytest.skip("torch not installed")
    seen = []

    def jit(self, fn, *, compile_backend=adapters.DEFAULT_TORCH_COMPILE_BACKEND):
        seen.append(compile_backend)
        return fn  # no compile: this test is about where the setting goes

    monkeypatch.setattr(adapters.TorchAdapter, "jit", jit)
    environ = dict(os.environ)
    argv = ["check", "--encoding", "learned", "--backend", "torch", "--dtype", "float32", "--mode", "jit", "-q",
            "--jobs", "1"]
    assert main([*argv, "--torch-compile-backend", "inductor"]) == 0
    assert seen and set(seen) == {"inductor"}
    seen.clear()
    assert main(argv) == 0
    assert seen and set(seen) == {adapters.DEFAULT_TORCH_COMPILE_BACKEND} == {"aot_eager"}
    assert dict(os.environ) == environ  # nothing leaks into the calling process
    assert "torch.compile backend aot_eager" in capsys.readouterr().out


_FRAMEWORK_LOG = re.compile(r"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]|WARNING: All log messages before "
                            r"absl::InitializeLog)", re.M)


def _subprocess_output(*argv):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP_", "POSENC_"))}
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=environ, timeout=300,
                          cwd=ROOT)
    return done.returncode, done.stdout + done.stderr


def test_no_framework_log_lines_unless_verbose():
    """`python -m posenc check` on TensorFlow: its C++ log lines (`I0000 ... oneDNN custom operations are
    on`, `E0000 ...`), which TF_CPP_MIN_LOG_LEVEL does not silence since TF 2.17, stay out of the output."""
    pytest.importorskip("tensorflow")
    code, plain = _subprocess_output("-c", "import tensorflow")
    assert code == 0, plain
    if not _FRAMEWORK_LOG.search(plain):
        pytest.skip("this TensorFlow build logs nothing at import: nothing for posenc to hide")
    code, out = _subprocess_output("-m", "posenc", "check", "--encoding", "sinusoidal", "--backend", "tf",
                                   "--mode", "eager")
    assert code == 0, out
    assert not _FRAMEWORK_LOG.search(out), out
    assert "0 failed, 0 skipped" in out  # the filter keeps everything else


def test_framework_log_filter_keeps_everything_else():
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    os.write(write_fd, b"I0000 00:00:1796101788.462397   12441 port.cc:153] oneDNN custom operations are on.\n"
                       b"posenc check: a message\n"
                       b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                       b"E0000 00:00:1758131045.203198 3722035 cpu_utils.cc:9] oneDNN supports DT_HALF on AVX-512\n"
                       b"2025-09-17 14:44:05.157831: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] no cuda\n"
                       b"F0000 00:00:1.0 1 a.cc:1] fatal lines stay\n"
                       b"Traceback (most recent call last):\n"
                       b"\r\x1b[K[3/10 1.0s] progress without a newline")
    os.close(write_fd)
    quiet._forward_filtered(read_fd, out_w, threading.Event())
    os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        kept = f.read()
    assert kept == (b"posenc check: a message\nF0000 00:00:1.0 1 a.cc:1] fatal lines stay\n"
                    b"Traceback (most recent call last):\n\r\x1b[K[3/10 1.0s] progress without a newline")


def test_framework_log_filter_stops_when_told_though_a_writer_outlives_the_block():
    """A process that inherited the pipe (multiprocessing's resource tracker) keeps a write end open: the
    filter drains what is there and ends on `stop`, without waiting for an end of file that comes late."""
    read_fd, write_fd = os.pipe()
    out_r, out_w = os.pipe()
    os.write(write_fd, b"last line\n")
    stop = threading.Event()
    stop.set()
    thread = threading.Thread(target=quiet._forward_filtered, args=(read_fd, out_w, stop))
    thread.start()
    thread.join(timeout=2)
    alive = thread.is_alive()
    os.close(write_fd)  # ends a forwarder still waiting, so that a failure does not hang the session
    thread.join()
    os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        assert not alive and f.read() == b"last line\n"


def test_python_m_posenc_is_the_console_script():
    code, out = _subprocess_output("-m", "posenc", "--help")
    assert code == 0 and all(name in out for name in ("check", "port", "doctor", "plot", "experiment")), out


def test_unwritable_report_path_is_bad_usage(tmp_path, capsys):
    assert main(["check", "--encoding", "learned", "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_missing_backend_is_skipped_unless_required(monkeypatch, capsys):
    monkeypatch.setattr(adapters.TFAdapter, "available", lambda self: False)
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
def test_planted_mismatch_turns_the_run_red(plant, backend, monkeypatch, capsys):
    """Each plant in each backend `--backends` selects (every installed one by default) fails the check."""
    make, family = PLANTS[plant]
    name, planted = make(backend.module)
    monkeypatch.setattr(backend.module, name, planted)
    code = main(["check", "--encoding", family, "--backend", backend.name, "--dtype", "float32", *FAST])
    out = capsys.readouterr().out
    assert code == 1, out
    failures = out.split("PASSED")[0]
    assert family in failures and backend.name in failures
