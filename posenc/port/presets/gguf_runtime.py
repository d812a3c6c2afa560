"""llama.cpp and transformers as the judges of a GGUF port: the logits each gives for one token list.

`llamacpp_logits` loads a GGUF in llama.cpp itself (llama-cpp-python 0.3.36, which builds the llama.cpp it
vendors) and evaluates the tokens in one batch with every position's logits kept; the KV cache is float32
(`type_k = type_v = GGML_TYPE_F32`, llama.cpp's default is F16, which would round K and V to 11 bits) and
the sliding-window cache full size (`swa_full`), so what differs from transformers is the model, not the
cache. A GGUF without a vocabulary (`tokenizer.ggml.model = none`) has no logits in llama.cpp (its context
sizes them by the vocabulary's token count), so it cannot be judged this way.

`hf_logits` builds the transformers model of an HF config and loads a checkpoint's tensors into it.

`llamacpp_check` is the verification a GGUF preset adds when llama-cpp-python is installed: llama.cpp's
logits on the written file against transformers' on SOURCE for a prompt longer than any sliding window,
within float32 rounding plus, for a quantized or half-precision file, the error its tensors' rounding is
expected to cause (`posenc.formats.gguf_quant.expected_logit_error`); its note names the tensors that
carry most of that error and the fraction of positions whose next-token choice is the same.
"""

from __future__ import annotations

import math
import os

import numpy as np

from posenc_np.testing import tolerance

from ...formats.gguf_quant import QUANTIZED, error_bound, expected_logit_error, quantization_error, rounded
from ..checks import Check
from ..mapping import build_plan

__all__ = ["llamacpp_available", "llamacpp_logits", "hf_logits", "probe_tokens", "prompt_length", "Rounding",
           "llamacpp_check", "llamacpp_tolerance", "rounding_gain", "float32_logit_tolerance", "GELU_ARCHS", "GELU_F16_REL"]

_GGML_TYPE_F32 = 0
#: llama.cpp architectures whose feed-forward uses `LLM_FFN_GELU` (src/models/gemma*.cpp, gptneox.cpp): ggml's CPU
#: GELU rounds its input to float16 and reads a float16 table (ggml-cpu/vec.h, `GGML_GELU_FP16`), a relative RMS
#: perturbation of the activations of about 2^-11 / sqrt(3) for each of the two roundings
GELU_ARCHS = ("gemma", "gemma2", "gemma3", "gptneox")
GELU_F16_REL = math.sqrt(2) * 2.0 ** -11 / math.sqrt(3)


def llamacpp_available() -> bool:
    """Whether llama-cpp-python imports (it needs its compiled library)."""
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


_LOG = []  # llama.cpp's log lines of the current load (its messages name why a file is refused)
_LOG_CALLBACK = None


def _quiet_llamacpp(llama_cpp):
    """Route llama.cpp's log into `_LOG` (kept referenced: llama.cpp calls it from C)."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:
        import ctypes

        def keep(level, text, data):
            _LOG.append(text.decode("utf-8", "replace") if text else "")
            del _LOG[:-200]

        _LOG_CALLBACK = llama_cpp.llama_log_callback(keep)
        llama_cpp.llama_backend_init()
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def llamacpp_logits(path, tokens, *, threads=None) -> np.ndarray:
    """llama.cpp's logits `[len(tokens), n_vocab]` (float32) for `tokens` evaluated from position 0 in one batch.

    llama-cpp-python's C API (`llama_model_load_from_file`, `llama_init_from_model`, `llama_decode`,
    `llama_get_logits`). Weight repacking into the CPU backend's extra buffer types is off
    (`use_extra_bufts = False`): with it, this build of llama.cpp 0.3.36 crashes (SIGSEGV in `llama_decode`)
    on Q8_0/Q4_0 weights on this machine's AVX512/AMX CPU, also for files llama.cpp's own
    `llama_model_quantize` writes; the plain CPU kernels compute the same model.
    ValueError when llama.cpp refuses the file (its last log lines say why) or the file has no vocabulary."""
    import llama_cpp as L

    _quiet_llamacpp(L)
    tokens = [int(t) for t in tokens]
    n = max(len(tokens), 1)
    del _LOG[:]
    params = L.llama_model_default_params()
    params.use_extra_bufts = False
    model = L.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        said = " ".join(line.strip() for line in _LOG if "error" in line.lower() or "fail" in line.lower())
        raise ValueError(f"llama.cpp refuses {path}: {said or 'llama_model_load_from_file failed'}")
    ctx = batch = None
    try:
        vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        if vocab == 0:
            raise ValueError(f"{path}: the GGUF has no vocabulary (tokenizer.ggml.model = none); llama.cpp gives "
                             "no logits without one")
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n, n, n
        cp.type_k = cp.type_v = _GGML_TYPE_F32
        cp.swa_full, cp.flash_attn_type = True, 0  # full-size sliding-window cache; flash attention off
        if threads:
            cp.n_threads = cp.n_threads_batch = int(threads)
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise ValueError(f"llama.cpp could not create a context for {path}")
        batch = L.llama_batch_init(n, 0, 1)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, i, 1, 1
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(tokens)
        code = L.llama_decode(ctx, batch)
        if code != 0:
            raise ValueError(f"llama.cpp's llama_decode returned {code} for {path}")
        logits = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(len(tokens) * vocab,))
        return logits.reshape(len(tokens), vocab).astype(np.float32)
    finally:
        if batch is not None:
            L.llama_batch_free(batch)
        if ctx:
            L.llama_free(ctx)
        L.llama_model_free(model)


def hf_logits(config, reader, tokens, *, rounded_weights=None) -> np.ndarray:
    """transformers' float32 logits `[len(tokens), vocab]` of the causal LM of `config` (a config.json dict) with
    SOURCE's tensors: `from_pretrained` of SOURCE's directory when SOURCE is its standard checkpoint (so
    transformers applies its own checkpoint renames, e.g. GPT-NeoX's `embed_out` -> `lm_head`), else the
    tensors of `reader` loaded by name (every parameter required, except an output head tied to the embedding).
    `rounded_weights`: parameter name -> GGUF type; those parameters hold `gguf_quant.rounded` values (what a
    file of that type holds) instead of SOURCE's."""
    import torch
    import transformers

    directory = reader.path if os.path.isdir(reader.path) else os.path.dirname(os.path.abspath(reader.path))
    standard = [os.path.join(directory, n) for n in ("model.safetensors", "model.safetensors.index.json")]
    if os.path.isdir(reader.path) or os.path.abspath(reader.path) in standard:
        transformers.utils.logging.disable_progress_bar()
        model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    else:
        fields = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version", "model_type")}
        cfg = transformers.AutoConfig.for_model(config["model_type"], **fields)
        # the causal-LM class of config.json's model_type (a Mistral config is a MistralForCausalLM, though
        # llama.cpp's family is llama's); its rotary buffers come from the config
        model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
        state = {name: torch.from_numpy(np.array(reader.get(name), np.float32))
                 for name in reader.names() if not name.endswith("rotary_emb.inv_freq")}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
        if missing or unexpected:
            raise ValueError(f"SOURCE does not fill {type(model).__name__}: missing {missing[:3]}, unexpected "
                             f"{unexpected[:3]}")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in (rounded_weights or {}):
                param.copy_(torch.from_numpy(rounded(param.numpy(), rounded_weights[name]).astype(np.float32)))
        return model(torch.tensor([list(map(int, tokens))])).logits[0].float().numpy()


def probe_tokens(vocab, count, *, seed=0):
    """`count` token ids drawn uniformly from `[0, vocab)` (fixed seed)."""
    return np.random.default_rng(seed).integers(0, vocab, count).tolist()


def float32_logit_tolerance(desired, layers):
    """Float32 rounding of two runtimes computing one forward: 64 ulps of the largest logit per layer.

    Each layer adds a few float32 roundings of O(1) relative size in different orders (ggml's SIMD sums
    against torch's); 64 ulps per layer is the slack measured to cover them (docs/port.md)."""
    return tolerance("float32", scale=float(np.abs(desired).max()), slack_ulps=64 * max(int(layers), 1))


def _window(config):
    return int(config.get("sliding_window") or 0)


def prompt_length(config):
    """Probe prompt length: longer than any sliding window, at least 32, at most the context length. With
    LongRoPE, past the original context: llama.cpp picks the long factors when its context (the prompt length
    rounded up to 256, llama-context.cpp) exceeds the original context, transformers when the sequence does;
    both pick them for such a prompt (`llama_model::get_rope_factors`, src/llama-model.cpp)."""
    length = max(32, _window(config) + 16)
    scaling = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) in ("longrope", "su"):
        original = scaling.get("original_max_position_embeddings") or config.get("original_max_position_embeddings")
        length = max(length, int(original) + 16)
    return int(min(int(config["max_position_embeddings"]), length))


class Rounding:
    """The tensors a GGUF port writes in a rounded type (`--outtype` f16, bf16, q8_0, ...), checked and measured.

    `rounding_check` compares each such tensor as read back (dequantized) with the values it was written from
    (SOURCE through every conversion before the rounding), element by element against
    `gguf_quant.error_bound`, and keeps each tensor's `TensorError` in `errors` for `llamacpp_check`."""

    def __init__(self, rules, types, hf=None):
        self.rules, self.types, self.errors = rules, dict(types), []
        self.hf = dict(hf or {})  # the same tensors by SOURCE (HF) name

    def rounding_check(self, source, target):
        checks, self.errors = [], []
        for entry in build_plan(source, self.rules):
            kind = self.types.get(entry.target)
            if kind is None or kind == "F32":
                continue
            values = np.asarray(source.get(entry.source))
            for op in entry.ops[:-1]:  # the last op is the rounding itself
                values = op.apply(values)
            written = np.asarray(target.get(entry.target))
            values64, written64 = np.asarray(values, np.float64), np.asarray(written, np.float64)
            error = np.abs(written64 - values64).reshape(-1)
            bound = error_bound(values, kind).reshape(-1)
            # the element nearest its bound is the one reported: its error and its bound
            worst = int(np.argmax(error / np.maximum(bound, np.finfo(np.float64).tiny))) if error.size else 0
            e = quantization_error(entry.target, values, kind, written=written)
            self.errors.append(e)
            err, atol = (float(error[worst]), float(bound[worst])) if error.size else (0.0, 0.0)
            note = (f"{kind}; max |err| {e.max_abs_err:.3g}, RMS error {e.rel_rms_err:.2e} of the tensor's RMS"
                    + (f", mean step {e.mean_step:.3g}" if e.mean_step else ""))
            checks.append(Check("rounding", entry.target, err, atol,
                                f"{kind} step bound per block (gguf_quant.error_bound)" if kind in QUANTIZED
                                else f"{kind}: half an ulp", bool(err <= atol), note))
        return checks


def rounding_gain(desired, rounded_logits, errors):
    """How much this model amplifies weight rounding beyond the first-order model: RMS of the logit change that
    transformers computes with the rounded weights, over `expected_logit_error`'s sigma for the weights alone
    (no activation terms). Sharp attention (Gemma 3's normalised q and k) gives more than 1."""
    desired, rounded_logits = np.asarray(desired, np.float64), np.asarray(rounded_logits, np.float64)
    rms = math.sqrt(float(np.mean(desired * desired)))
    sigma = rms * math.sqrt(sum(e.rel_rms_err ** 2 for e in errors))
    return math.sqrt(float(np.mean((rounded_logits - desired) ** 2))) / sigma if sigma else 1.0


def llamacpp_tolerance(desired, *, layers, arch, errors=(), gain=1.0):
    """`(atol, shares, why)` for llama.cpp's logits against `desired` (a float model's logits): float32 rounding
    (`float32_logit_tolerance`) plus the first-order expected effect (`gguf_quant.expected_logit_error`) of the
    rounded tensors `errors` and, for `GELU_ARCHS`, of ggml's float16 GELU in every layer, times the model's
    `gain` (`rounding_gain`) where it exceeds 1."""
    atol = float32_logit_tolerance(desired, layers).atol
    why = "float32, 64 ulps of the largest logit per layer"
    errors = [e for e in errors if e.rel_rms_err > 0]
    gelu = {f"blk.{i}.ffn (ggml's float16 GELU)": GELU_F16_REL for i in range(layers)} if arch in GELU_ARCHS else {}
    if not (errors or gelu):
        return atol, {}, why
    rms = math.sqrt(float(np.mean(np.square(desired, dtype=np.float64))))
    expected, shares = expected_logit_error(errors, logits_rms=rms, samples=np.size(desired), extra=gelu)
    expected *= max(float(gain), 1.0)
    why += (f" + {expected:.3g} expected from {len(errors)} rounded tensors" + (" and ggml's float16 GELU" if gelu
                                                                               else "")
            + (f", x{gain:.2f} measured gain" if gain > 1 else "") + " (first order, docs/port.md)")
    return atol + expected, shares, why


def llamacpp_check(family, config, rounding=None):
    """The check a GGUF preset adds: `(source, target) -> [Check]`, llama.cpp on the written file against
    transformers on SOURCE, within float32 rounding plus the rounded tensors' expected effect (`rounding`:
    the preset's `Rounding`, whose check runs first)."""

    def llamacpp_logits_check(source, target):
        n_vocab = target.shape("token_embd.weight")[0]
        tokens = probe_tokens(n_vocab, prompt_length(config))
        desired = hf_logits(config, source, tokens).astype(np.float64)
        actual = llamacpp_logits(target.path, tokens).astype(np.float64)
        if actual.shape != desired.shape:
            return [Check("llamacpp-logits", "llama.cpp (GGUF) vs transformers (SOURCE)", float("inf"), 0.0, "",
                          False, f"llama.cpp gave logits {actual.shape}, transformers {desired.shape}")]
        errors = [e for e in (rounding.errors if rounding else []) if e.rel_rms_err > 0]
        gain = 1.0
        if errors:  # the model's own amplification of its weights' rounding, by transformers on the rounded weights
            gain = rounding_gain(desired, hf_logits(config, source, tokens, rounded_weights=rounding.hf), errors)
        atol, shares, why = llamacpp_tolerance(desired, layers=int(config["num_hidden_layers"]), arch=family.arch,
                                               errors=errors, gain=gain)
        extra = ("; most of the expected error: " + ", ".join(f"{name} {share:.0%}"
                                                              for name, share in list(shares.items())[:3])
                 if shares else "")
        err = float(np.abs(actual - desired).max())
        same = float(np.mean(actual.argmax(-1) == desired.argmax(-1)))
        note = f"{len(tokens)} tokens; same next token at {same:.0%} of positions" + extra
        return [Check("llamacpp-logits", "llama.cpp (GGUF) vs transformers (SOURCE)", err, atol, why,
                      bool(err <= atol), note)]

    return llamacpp_logits_check
