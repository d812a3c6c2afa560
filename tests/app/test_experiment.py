"""`posenc experiment`: the --quick smoke run trains every encoding, reports, reproduces; bad input exits 2."""

from __future__ import annotations

import io
import json
import math
import os
import stat

import numpy as np
import pytest

from posenc.cli import main
from posenc.tools import experiment as ex
from posenc.tools.corpus import load_corpus


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One `posenc experiment --quick` run with every report written (the CI smoke test)."""
    out = tmp_path_factory.mktemp("quick")
    paths = {"json": out / "r.json", "markdown": out / "r.md", "plot": out / "ppl.png"}
    argv = ["experiment", "--quick", "--threads", "1", "--quiet", "--save-weights", str(out)]
    for key, path in paths.items():
        argv += [f"--{key}", str(path)]
    saved = os.umask(0o022)
    try:
        code = main(argv)
    finally:
        os.umask(saved)
    return code, out, paths, json.loads(paths["json"].read_text())


def test_quick_trains_every_encoding(quick):
    code, _, _, report = quick
    assert code == 0
    rows = {r["encoding"]: r for r in report["rows"]}
    assert list(rows) == list(ex.VARIANTS)
    for row in rows.values():
        assert row["loss_last"] < row["loss_first"] - 0.5, row["encoding"]  # the loss falls
        assert all(math.isfinite(v) for v in row["losses"])
        ppl = list(row["ppl"].values())
        assert len(ppl) == 4 and all(math.isfinite(p) and 1 < p < 256 for p in ppl), row["encoding"]
        assert row["tokens_per_s"] > 0 and row["peak_mem_mib"] > 0 and row["params"] > 0


def test_quick_reports(quick):
    _, out, paths, report = quick
    assert report["argv"][:2] == ["--quick", "--threads"]
    assert report["eval_lengths"] == [32, 64, 128, 256]
    markdown = paths["markdown"].read_text()
    assert markdown.startswith("Made by `posenc experiment --quick")
    assert "| encoding | ppl@32 | ppl@64 | ppl@128 | ppl@256 |" in markdown
    assert "resize_table" in markdown  # the run says how the learned table was extended
    assert paths["plot"].read_bytes().startswith(b"\x89PNG")
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths.values()} == {0o644}  # ordinary files (umask 022)
    assert np.load(out / "learned_table.npy").shape == (32, 32)
    assert np.load(out / "t5_table.npy").shape == (ex.T5_BUCKETS, 2)


def test_rope_scaling_variants_share_the_rope_model(quick):
    """At the training length every scaling has factor 1, i.e. plain RoPE: identical perplexity."""
    rows = {r["encoding"]: r for r in quick[3]["rows"]}
    at_train = [rows[n]["ppl"]["32"] for n in ("rope", "rope-pi", "rope-ntk", "rope-yarn")]
    # the trained module gathers cos/sin from its float32 cache, the evaluation modules compute them:
    # the same angles up to float32 rounding, so the perplexities agree to ~1e-7, not bit for bit
    assert at_train == pytest.approx([at_train[0]] * 4, rel=1e-5)
    assert rows["rope-pi"]["ppl"]["256"] != rows["rope"]["ppl"]["256"]
    assert {rows[n]["trained_as"] for n in ex.ROPE_SCALING} == {"rope"}


def test_reproducible(quick, tmp_path):
    """Same seed, same data order, same initialisation: the alibi row is reproduced exactly."""
    path = tmp_path / "again.json"
    assert main(["experiment", "--quick", "--threads", "1", "--quiet", "--encodings", "alibi",
                 "--json", str(path)]) == 0
    again = json.loads(path.read_text())["rows"][0]
    first = {r["encoding"]: r for r in quick[3]["rows"]}["alibi"]
    assert again["losses"] == first["losses"]  # training is bit for bit the same
    assert again["ppl"] == pytest.approx(first["ppl"], rel=1e-6)


def test_learned_table_is_resized_for_longer_evaluation():
    import torch

    cfg = ex.Config(train_len=8, d_model=8, layers=1, heads=2, d_ff=8, batch=2, steps=1, eval_tokens=64,
                    eval_factors=(1, 2))
    torch.manual_seed(0)
    model = ex._build_model("learned", cfg)
    tokens = np.arange(200, dtype=np.uint8)
    with pytest.raises(ValueError, match="positions"):  # the raw table ends at the training length
        ex.evaluate(model, tokens, 16, cfg, device="cpu")
    table = __import__("posenc_torch").resize_table(model.absolute.table.detach(), 16)
    assert math.isfinite(ex.evaluate(model, tokens, 16, cfg, device="cpu", table=table))


def test_shakespeare_split_by_play():
    corpus = load_corpus()
    assert corpus.valid_files and not set(corpus.valid_files) & set(corpus.train_files)
    assert all(n.endswith("_gut.txt") for n in corpus.train_files + corpus.valid_files)  # no Folio duplicates
    assert len(corpus.train_files) + len(corpus.valid_files) == 42
    assert corpus.train.dtype == np.uint8 and corpus.train.size > 4_000_000


def test_directory_and_file_corpora(tmp_path):
    for i in range(12):
        (tmp_path / f"doc{i:02d}.txt").write_text(f"text number {i}\n" * 5)
    corpus = load_corpus(str(tmp_path))
    assert corpus.valid_files == ["doc09.txt"]
    single = load_corpus(str(tmp_path / "doc00.txt"))
    total = len("text number 0\n" * 5)
    assert single.train.size == int(0.9 * total) and single.valid.size == total - int(0.9 * total)


def test_progress_bar():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = ex.Progress(20, "rope", stream=stream)
        for step in range(1, 21):
            bar.update(step, 1.0)
    assert tty.getvalue().count("\r") == 20 and tty.getvalue().endswith("]\n")
    assert len(pipe.getvalue().splitlines()) == 11 and "\r" not in pipe.getvalue()


@pytest.mark.parametrize("make_argv, needle", [
    (lambda d: ["--encodings", "rope,xpos"], "xpos"),
    (lambda d: ["--corpus", str(d / "missing.txt")], "does not exist"),
    (lambda d: ["--corpus", str(d / "empty.txt")], "empty"),
    (lambda d: ["--corpus", str(d / "small.txt"), "--train-len", "200"], "--train-len=200"),
    (lambda d: ["--corpus", str(d / "small.txt"), "--train-len", "16"], "validation split"),
    (lambda d: ["--json", str(d / "no" / "r.json")], "does not exist"),
    (lambda d: ["--plot", str(d / "ppl.gif")], ".png"),
    (lambda d: ["--heads", "3"], "--heads=3"),
])
def test_bad_input_exits_2(make_argv, needle, tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "small.txt").write_text("a short corpus. " * 10)
    assert main(["experiment", "--quick", "--quiet", *make_argv(tmp_path)]) == 2
    assert needle in capsys.readouterr().err
