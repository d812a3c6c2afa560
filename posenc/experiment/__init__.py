"""`posenc experiment`: train one small causal Transformer LM per positional encoding, then test extrapolation.

Every model is the same pre-LayerNorm decoder (byte vocabulary, untied output head, GELU MLP) trained on
the same batches in the same order (seeded); only the position encoding differs:

    none        no position information (a causal mask still leaks some: Haviv et al. 2022)
    sinusoidal  posenc_torch.SinusoidalEncoding added to the token embeddings (Vaswani)
    learned     posenc_torch.LearnedEncoding [train_len, d_model], initialised N(0, 1) like the token
                embeddings (not BERT's N(0, 0.02), see docs/experiment.md); longer evaluations use
                posenc_torch.resize_table (linear) to stretch it to the evaluation length
    rope        posenc_torch.RotaryEmbedding on queries and keys (half layout, base 10000)
    rope-pi / rope-ntk / rope-yarn
                the rope model evaluated with HF-format scaling dicts, factor = eval_len / train_len:
                {"rope_type": "linear"} (position interpolation), {"rope_type": "ntk"},
                {"rope_type": "yarn", "original_max_position_embeddings": train_len}; no fine-tuning
    alibi       posenc_torch.alibi_bias, form "causal" (Press et al.), added to the logits
    t5          posenc_torch.T5RelativeBias, unidirectional (T5 decoder: 32 buckets, max_distance 128),
                one table shared by all layers as in T5

The documents' schemes and the research encodings:

    dynamic     posenc_torch.DynamicPositionEncoding: x + Linear(sinusoidal(arange(seq))), trainable Linear
    hybrid      a per-layer stack (--stack, default "sinusoidal:half,learned:half": sinusoidal in the lower
                half of the layers, learned in the upper half, each added to the residual stream at its
                group's first layer) plus a relative bias in every layer (--stack-bias: t5 (default) or
                shaw, Shaw et al.'s q . a_ij^K with max_distance 16, or none)
    xpos        posenc_torch.apply_xpos on q and k (scale_base 512, gamma 0.4)
    kerple-log / kerple-power
                posenc_torch.KERPLEBias (trainable r1, r2 per head), shared by the layers
    sandwich    posenc_torch.sandwich_bias (dim = head_dim), fixed
    fire        posenc_torch.FIREBias (an MLP of the log-normalised distance), shared by the layers
    randomized  RoPE whose training positions are posenc_torch.sample_randomized_positions(train_len, L),
                L the longest evaluation length (Ruoss et al. 2023); arange at evaluation
    cope        posenc_torch.CoPE(head_dim, 64) in every layer, no other encoding (attention written out)

The none row is NoPE (posenc_torch.nope). Training tricks, for any trained encoding, as row suffixes
("+crop", "+prog", e.g. "learned+crop") or as options applying to every row: --random-crop (each window
is a crop of an L-byte sequence at a uniform offset and keeps its positions there, so absolute encodings
see every position up to L at the cost of train_len; learned tables get L rows) and --progressive (a
quarter of the steps at train_len/4 with 4x the batch, a quarter at train_len/2 with 2x, the rest at
train_len: the same tokens per step). --seeds 0,1,2 trains every model once per seed and reports
mean ± standard deviation.

Attention runs through posenc_torch.attention.sdpa_attention (torch SDPA with the bias as a float mask and the
causal mask folded in). Perplexity is per byte: exp(mean cross-entropy) over non-overlapping windows
of the evaluation length covering the same first `eval_tokens` validation bytes at every length.

The package, one module per role: `config` (the variants, `Config`, the sizes), `corpus` (byte corpora),
`models` (the PyTorch LM: `TinyLM`, `Block`), `train` (batches, the training loop, the
evaluation), `memory` (`PeakMemory`), `progress` (`Progress`), `run` (`run_experiment`), `report` (tables,
JSON), `figure` (`plot_perplexity`) and `command` (`posenc experiment`). `models`, `train`, `memory` and
`run` are PyTorch code and import torch at their top; the others import only NumPy, so `posenc`'s command
line builds without torch.
"""
