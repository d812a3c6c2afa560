"""attention-gym (PyPI `attn-gym`, checked on 0.0.17 = meta-pytorch/attention-gym 7fdb85d, torch 2.13): its
ALiBi FlexAttention score_mod, `attn_gym/mods/alibi.py` `generate_alibi_bias(H)`:

    alibi_mod(score, b, h, q_idx, kv_idx) = score + (kv_idx - q_idx) * exp2(-(h + 1) * 8 / H)

judged through `Implementation.from_score_mod` as the contract's `alibi_bias(form="causal")` (the paper's
`-m (i - j)`) and through eager `flex_attention` as `attention(bias=...)`. Its slopes are the geometric
`2^(-8(h+1)/H)` for every head count, Press et al.'s rule only when H is a power of two: the registry's 12
heads get 0.63, 0.40, ... where Press gives 0.5, 0.25, ..., then 2^-0.5 (diagnosis `slopes`).
Precision class: float32 (the bias is formed in flex's float32 working precision).
"""

from __future__ import annotations

import importlib.metadata

from ..implementation import Implementation, ImplementationUnavailable

DISTRIBUTION = "attn-gym"
#: the names of the Implementations `load()` returns (the records' `backend`), known without importing
NAMES = ("attn-gym",)


def load() -> Implementation:
    try:
        # the module alone: `import attn_gym` also imports its visualisation and benchmark helpers
        from attn_gym.mods.alibi import generate_alibi_bias
    except ImportError as error:
        raise ImplementationUnavailable(f"--impl attn-gym: attn_gym.mods.alibi does not import ({error})") from error
    return Implementation.from_score_mod(generate_alibi_bias, "attn-gym", family="alibi", factory=True, form="causal",
                                        version=importlib.metadata.version(DISTRIBUTION),
                                        description="generate_alibi_bias(H) score_mod through flex_attention (eager)")


#: how to install what this adapter runs (the ecosystem table's recipe)
INSTALL = "`pip install --no-deps attn-gym` (its declared dependencies would move torch; it needs only torch)"
#: upstream behaviour the checks found, each with a minimal reproduction (posenc.ecosystem's findings)
FINDINGS = (
    {
        "implementation": "attn-gym",
        "title": "generate_alibi_bias uses geometric slopes 2^(-8(h+1)/H): wrong for every head count that is "
                 "not a power of two",
        "text": ("attention-gym's ALiBi score_mod computes slope exp2(-(h+1)*8/H) for every H. Press et al.'s rule "
                 "(BLOOM, MPT, ggml, TE, MLX) equals it only when H is a power of two; otherwise it takes the "
                 "slopes of the power of two below H and interleaves the odd slopes of the next one. With 12 "
                 "heads the first slope is 0.63 instead of 0.5 and the ninth 2^-6 instead of 2^-0.5 (0.69 apart): a "
                 "model trained with Press's slopes (BLOOM-176B has 112 heads) gets different biases through "
                 "this score_mod."),
        "reproduction": ("import math\n"
                         "import torch\n"
                         "from attn_gym.mods.alibi import generate_alibi_bias\n"
                         "H = 12\n"
                         "mod = generate_alibi_bias(H)\n"
                         "got = [float(mod(torch.tensor(0.0), 0, torch.tensor(h), torch.tensor(1), torch.tensor(0)))\n"
                         "       for h in range(H)]  # score 0, key 1 before the query: -slope\n"
                         "c = 2 ** math.floor(math.log2(H))\n"
                         "press = [2 ** (-8 * (h + 1) / c) for h in range(c)]\n"
                         "press += [2 ** (-8 * (2 * i + 1) / (2 * c)) for i in range(H - c)]\n"
                         "worst = max(abs(-g - p) for g, p in zip(got, press))\n"
                         "print([round(-g, 4) for g in got])\n"
                         "print(press)\n"
                         "print('max slope difference', worst)  # 0.69 at 12 heads (head 8: 0.016 vs 2^-0.5; 0 for 8 or 16 heads)"),
        "still": "worst > 0.1",
    },
)

#: the verdicts at the pinned version, as data: every float32 comparison that fails or errors,
#: "implementation convention/case" -> diagnosis ("error": it raised);
#: tests/app/impl/test_builtin_verdicts.py runs the built-in and fails on any new or stale entry
EXPECTED = {
    # geometric slopes at the registry's 12 heads (0.69 apart at head 8): every press-alibi grid
    **{f"attn-gym press-alibi/{case}": "slopes"
       for case in ("short", "long", "kv-offset", "left-pad", "kv-offset-long", "past-256", "past-2048")},
    # MPT's convention at its default alibi_bias_max=8 is the same causal form (other max_bias: skips, the
    # factory takes no max_bias)
    "attn-gym mpt-alibi/kv-offset": "slopes",
}
