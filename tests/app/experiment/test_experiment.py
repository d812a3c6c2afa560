"""`posenc experiment`: the --quick smoke run trains every encoding, reports, reproduces; bad input exits 2."""

from __future__ import annotations

import io
import json
import math
import os
import stat
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import posenc_torch
from posenc.cli import main
from posenc.errors import UsageError
from posenc.experiment import config, models, progress, train
from posenc.experiment.corpus import load_corpus
from posenc.experiment.report import markdown_table
from posenc.experiment.run import run_experiment

QUICK_RESEARCH = ("dynamic", "cope")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One `posenc experiment --quick` run with every report written (the CI smoke test)."""
    out = tmp_path_factory.mktemp("quick")
    paths = {"json": out / "r.json", "markdown": out / "r.md", "plot": out / "ppl.png"}
    # the default rows plus two research rows (the dynamic encoding; CoPE, which writes attention out)
    argv = ["experiment", "--quick", "--threads", "1", "--quiet", "--save-weights", str(out),
            "--encodings", ",".join(config.BASELINE + QUICK_RESEARCH)]
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
    assert list(rows) == list(config.BASELINE + QUICK_RESEARCH)
    for row in rows.values():
        assert row["loss_last"] < row["loss_first"] - 0.5, row["encoding"]  # the loss falls
        assert all(math.isfinite(v) for v in row["losses"])
        ppl = list(row["ppl"].values())
        assert len(ppl) == 4 and all(math.isfinite(p) and 1 < p < 256 for p in ppl), row["encoding"]
        assert row["tokens_per_s"] > 0 and row["peak_mem_mib"] > 0 and row["params"] > 0


def test_quick_reports(quick):
    _, out, paths, report = quick
    assert report["argv"][:3] == ["--quick", "--encodings", ",".join(config.BASELINE + QUICK_RESEARCH)]
    assert report["argv"][report["argv"].index("--threads") + 1] == "1"
    assert report["eval_lengths"] == [32, 64, 128, 256]
    markdown = paths["markdown"].read_text()
    assert markdown.startswith("Made by `posenc experiment --quick")
    assert "| encoding | ppl@32 | ppl@64 | ppl@128 | ppl@256 |" in markdown
    assert "resize_table" in markdown  # the run says how the learned table was extended
    assert paths["plot"].read_bytes().startswith(b"\x89PNG")
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths.values()} == {0o644}  # ordinary files (umask 022)
    assert np.load(out / "learned_table.npy").shape == (32, 32)
    assert np.load(out / "t5_table.npy").shape == (config.T5_BUCKETS, 2)
    assert np.load(out / "dynamic_weight.npy").shape == (32, 32)  # [out, in]
    assert np.load(out / "cope_pos_emb.npy").shape == (config.COPE_MAX_POS, 16)
    assert np.abs(np.load(out / "cope_pos_emb.npy")).max() > 0  # trained away from its zero init


def test_rope_scaling_variants_share_the_rope_model(quick):
    """At the training length every scaling has factor 1, i.e. plain RoPE: identical perplexity."""
    rows = {r["encoding"]: r for r in quick[3]["rows"]}
    at_train = [rows[n]["ppl"]["32"] for n in ("rope", "rope-pi", "rope-ntk", "rope-yarn")]
    # the trained module gathers cos/sin from its float32 cache, the evaluation modules compute them:
    # the same angles up to float32 rounding, so the perplexities agree to ~1e-7, not bit for bit
    assert at_train == pytest.approx([at_train[0]] * 4, rel=1e-5)
    assert rows["rope-pi"]["ppl"]["256"] != rows["rope"]["ppl"]["256"]
    assert {rows[n]["trained_as"] for n in config.ROPE_SCALING} == {"rope"}


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
    cfg = config.Config(train_len=8, d_model=8, layers=1, heads=2, d_ff=8, batch=2, steps=1, eval_tokens=64,
                        eval_factors=(1, 2))
    torch.manual_seed(0)
    model = models.TinyLM("learned", cfg)
    tokens = np.arange(200, dtype=np.uint8)
    with pytest.raises(ValueError, match="positions"):  # the raw table ends at the training length
        train.evaluate(model, tokens, 16, cfg, device="cpu")
    table = posenc_torch.resize_table(model.absolute.table.detach(), 16)
    assert math.isfinite(train.evaluate(model, tokens, 16, cfg, device="cpu", table=table))


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
        bar = progress.Progress(20, "rope", stream=stream)
        for step in range(1, 21):
            bar.update(step, 1.0)
    assert tty.getvalue().count("\r") == 20 and tty.getvalue().endswith("]\n")
    assert len(pipe.getvalue().splitlines()) == 11 and "\r" not in pipe.getvalue()


@pytest.mark.parametrize("make_argv, needle", [
    (lambda d: ["--encodings", "rope,xpox"], "xpox"),
    (lambda d: ["--encodings", "hybrid", "--stack", "sinusoidal:1,learned:2"], "--stack"),
    (lambda d: ["--encodings", "hybrid", "--stack", "alibi:2"], "'alibi'"),
    (lambda d: ["--encodings", "rope-pi", "--random-crop"], "rope-pi"),
    (lambda d: ["--seeds", "0,0"], "--seeds"),
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


TINY = config.Config(train_len=8, d_model=16, layers=2, heads=2, d_ff=16, batch=2, steps=4, eval_tokens=64,
                     eval_factors=(1, 2), warmup=1)


@pytest.mark.parametrize("encoding", config.RESEARCH + ("none",))
def test_research_models_train_and_extrapolate(encoding):
    """Every research model: finite logits at the training length and twice it, and gradients reaching its
    position parameters (those it has) from one step."""
    torch.manual_seed(0)
    model = models.TinyLM(encoding, TINY)
    tokens = torch.randint(0, 256, (2, 16))
    loss = model(tokens[:, :8]).logsumexp(-1).mean()
    loss.backward()
    learned = models.learned_module(model)  # hybrid: its learned group is stretched, as the evaluation does
    table = None if learned is None else posenc_torch.resize_table(learned.table.detach(), 16)
    assert torch.isfinite(model(tokens, table=table).detach()).all()  # 2x the training length
    position_params = {n: p for n, p in model.named_parameters()
                       if n.split(".")[0] in ("absolute", "stack_modules", "t5", "kerple", "fire")
                       or ".cope." in n}
    expected = encoding in ("dynamic", "hybrid", "kerple-log", "kerple-power", "fire", "cope")
    assert bool(position_params) == expected, sorted(position_params)
    for name, p in position_params.items():
        if not name.endswith("L_multiplier"):  # FIRE's L only matters once positions pass init_L = 512
            assert p.grad is not None and float(p.grad.abs().sum()) > 0, name


def test_position_encoding_changes_the_output():
    """Each encoding is wired in: shifting the positions of a crop changes the absolute rows' logits, not
    the relative rows' (shift invariance), and the randomized row reads the positions it is given."""
    tokens = torch.randint(0, 256, (1, 8))
    shifted = torch.arange(8)[None] + 5
    for encoding, moves in (("sinusoidal", True), ("dynamic", True), ("hybrid", True), ("alibi", False),
                            ("kerple-log", False), ("fire", False), ("sandwich", False), ("xpos", False),
                            ("randomized", False)):
        torch.manual_seed(0)
        model = models.TinyLM(encoding, TINY, random_crop=True).eval()
        with torch.no_grad():
            a, b = model(tokens), model(tokens, positions=shifted)
        # FIRE normalises by max(i, L), the constant L = 512 at these positions: shift invariant here too
        assert (not torch.allclose(a, b, atol=1e-5)) == moves, encoding
    torch.manual_seed(0)
    model = models.TinyLM("randomized", TINY).eval()
    with torch.no_grad():
        gaps = model(tokens, positions=torch.arange(0, 16, 2)[None])
    assert not torch.allclose(model(tokens).detach(), gaps, atol=1e-5)


def test_training_batches_tricks():
    cfg = replace(TINY, steps=8, batch=4)
    plain = list(train.training_batches(10_000, cfg))
    assert [p for _, _, p in plain] == [None] * 8 and all(n == 8 for _, n, _ in plain)
    assert np.array_equal(np.stack([s for s, _, _ in plain]), train.training_starts(10_000, cfg))
    crops = [p.numpy() for _, _, p in train.training_batches(10_000, cfg, random_crop=True)]
    assert all((np.diff(p, axis=1) == 1).all() and p.min() >= 0 and p.max() < cfg.span for p in crops)
    assert len({int(p[0, 0]) for p in crops}) > 1  # offsets vary
    sampled = [p.numpy() for _, _, p in train.training_batches(10_000, cfg, randomized=True)]
    assert all((np.diff(p, axis=1) > 0).all() and p.max() < cfg.span for p in sampled)
    assert any((np.diff(p, axis=1) > 1).any() for p in sampled)  # gaps: not arange
    progressive = [(s.size, n) for s, n, _ in train.training_batches(10_000, cfg, progressive=True)]
    assert progressive == [(16, 2)] * 2 + [(8, 4)] * 2 + [(4, 8)] * 4  # same tokens per step
    assert config.progressive_schedule(cfg) == [(0, 2, 16), (2, 4, 8), (4, 8, 4)]


def test_stack_parsing():
    assert config.parse_stack("sinusoidal:half,learned:half", 4) == (("sinusoidal", 2), ("learned", 2))
    assert config.parse_stack("sinusoidal:half,learned:half", 3) == (("sinusoidal", 2), ("learned", 1))
    assert config.parse_stack("none:1,rope:2", 3) == (("none", 1), ("rope", 2))
    for bad in ("sinusoidal:3", "alibi:2", "sinusoidal:x,learned:1", ""):
        with pytest.raises(UsageError):
            config.parse_stack(bad, 2)


def test_seeds_are_averaged_and_tricks_are_rows():
    """Two seeds: mean and sample std per length from the seeds' values; +crop / +prog rows are models of
    their own, noted in the report."""
    corpus = SimpleNamespace(train=np.frombuffer(b"abcdefgh " * 400, np.uint8),
                             valid=np.frombuffer(b"hgfedcba " * 40, np.uint8), valid_files=[], name="t",
                             describe=lambda: "tiny")
    report = run_experiment(TINY, corpus, encodings=["alibi", "learned+crop", "rope+prog"], progress=False,
                               log=lambda *a: None, seeds=[0, 1])
    rows = {r["encoding"]: r for r in report["rows"]}
    for row in rows.values():
        for n in TINY.eval_lengths:
            values = row["ppl_seeds"][n]
            assert row["ppl"][n] == pytest.approx(np.mean(values))
            assert row["ppl_std"][n] == pytest.approx(np.std(values, ddof=1)) and row["ppl_std"][n] > 0
    assert "--random-crop" in rows["learned+crop"]["note"] and "resize_table" not in rows["learned+crop"]["note"]
    assert "--progressive" in rows["rope+prog"]["note"]
    table = markdown_table(report)
    assert " ± " in table and "seeds [0, 1]" in table
