"""The tokenizer of an HF checkpoint as GGUF `tokenizer.ggml.*` key/values, read with gguf-py's own offline
vocab readers (what llama.cpp's converter does in `get_vocab_base` / `_set_vocab_*`)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["tokenizer_kv"]


def tokenizer_kv(directory, vocab_size):
    """tokenizer.ggml.* from tokenizer.json beside SOURCE with gguf-py's own offline vocab readers
    (`gguf.vocab.BpeVocab` for byte-level BPE, `LlamaHfVocab` for SentencePiece-style BPE, `SpecialVocab`
    for merges and special ids); `(kv, note)`. Without one: `tokenizer.ggml.model = "none"`."""
    path = Path(directory)
    if not (path / "tokenizer.json").is_file():
        return ([("tokenizer.ggml.model", "none", "string")],
                "no tokenizer.json beside SOURCE: tokenizer.ggml.model = none")
    from gguf.vocab import BpeVocab, LlamaHfVocab, SpecialVocab

    vocab, model = None, None
    errors = []
    for kind, name in ((BpeVocab, "gpt2"), (LlamaHfVocab, "llama")):
        try:
            vocab, model = kind(path), name
            break
        except Exception as error:  # noqa: BLE001 - each reader says "not my format" its own way
            errors.append(f"{kind.__name__}: {type(error).__name__}: {error}")
    if vocab is None:
        return [("tokenizer.ggml.model", "none", "string")], ("tokenizer.json is not a format gguf-py reads ("
                                                              + "; ".join(errors) + "): tokenizer.ggml.model = none")
    tokens, scores, types = [], [], []
    for text, score, kind in vocab.all_tokens():
        tokens.append(text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text))
        scores.append(float(score))
        types.append(int(kind))
    if len(tokens) > vocab_size:
        return [("tokenizer.ggml.model", "none", "string")], (f"tokenizer.json has {len(tokens)} tokens, the model "
                                                              f"{vocab_size} rows: tokenizer.ggml.model = none")
    for i in range(len(tokens), vocab_size):  # as convert_hf_to_gguf.py get_vocab_base: unused padding rows
        tokens.append(f"[PAD{i}]")
        scores.append(-1000.0)
        types.append(5)  # gguf.TokenType.UNUSED
    kv = [("tokenizer.ggml.model", model, "string"), ("tokenizer.ggml.tokens", tokens, "array"),
          ("tokenizer.ggml.token_type", types, "array")]
    if model == "gpt2":
        kv.append(("tokenizer.ggml.pre", "default", "string"))
    else:
        kv.append(("tokenizer.ggml.scores", scores, "array"))
    special = SpecialVocab(path, load_merges=model == "gpt2", n_vocab=len(tokens))
    if special.merges:
        kv.append(("tokenizer.ggml.merges", list(special.merges), "array"))
    names = {"bos": "bos", "eos": "eos", "unk": "unknown", "sep": "seperator", "pad": "padding"}
    for kind, token_id in special.special_token_ids.items():
        if kind in names:
            kv.append((f"tokenizer.ggml.{names[kind]}_token_id", int(token_id), "uint32"))
    for kind, value in special.add_special_token.items():
        if kind in ("bos", "eos"):
            kv.append((f"tokenizer.ggml.add_{kind}_token", bool(value), "bool"))
    return kv, f"tokenizer.json carried as tokenizer.ggml.model = {model} ({len(tokens)} tokens)"
