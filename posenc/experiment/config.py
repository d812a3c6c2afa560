"""What `posenc experiment` trains and evaluates: the variants, the hybrid stack, the sizes (`Config`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UsageError

__all__ = ["Config", "DEFAULT", "QUICK", "TRAINED", "RESEARCH", "BASELINE", "VARIANTS", "ROPE_SCALING", "TRICKS",
           "split_variant", "parse_stack", "progressive_schedule", "with_overrides"]


TRAINED = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
#: the research encodings and the documents' dynamic and hybrid schemes, each a trained model
RESEARCH = ("dynamic", "hybrid", "xpos", "kerple-log", "kerple-power", "sandwich", "fire", "randomized", "cope")
ROPE_SCALING = {"rope-pi": "linear", "rope-ntk": "ntk", "rope-yarn": "yarn"}
BASELINE = ("none", "sinusoidal", "learned", "rope", "rope-pi", "rope-ntk", "rope-yarn", "alibi", "t5")
#: the training tricks, as row-name suffixes ("rope+crop") or as the options --random-crop / --progressive
TRICKS = {"+crop": "random_crop", "+prog": "progressive"}
_TRICK_BASES = ("none", "sinusoidal", "learned", "rope", "alibi", "t5") + RESEARCH
VARIANTS = BASELINE + RESEARCH + tuple(f"{b}{t}" for t in TRICKS for b in _TRICK_BASES)
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128
#: the hybrid scheme's default stack: "sinusoidal in the lower layers, learned in the upper layers, a relative
#: position bias in attention"; `--stack` / `--stack-bias` choose another
HYBRID_STACK, HYBRID_BIAS = "sinusoidal:half,learned:half", "t5"
STACK_ENCODINGS = ("none", "sinusoidal", "learned", "dynamic", "rope")
STACK_BIASES = ("t5", "shaw", "none")
COPE_MAX_POS = 64       # CoPE's npos_max: positions counted by the gates are clipped here (paper: 64 for LM)
SHAW_MAX_DISTANCE = 16  # Shaw et al.'s clipping distance k (they found 16 enough)
XPOS_SCALE_BASE = 512.0


def split_variant(name: str):
    """`"rope+crop+prog"` -> `("rope", {"random_crop": True, "progressive": False})`."""
    tricks = dict.fromkeys(TRICKS.values(), False)
    for suffix, key in TRICKS.items():
        if suffix in name:
            tricks[key], name = True, name.replace(suffix, "")
    return name, tricks


def parse_stack(text: str, layers: int) -> tuple:
    """`"sinusoidal:2,learned:2"` -> `(("sinusoidal", 2), ("learned", 2))`, bottom layer first; counts must sum to
    `layers`. `half` stands for `layers // 2` (the first `half` gets the rest when `layers` is odd)."""
    parts = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, _, count = item.partition(":")
        if name not in STACK_ENCODINGS:
            raise UsageError(f"--stack {text!r}: {name!r} is not one of {', '.join(STACK_ENCODINGS)}")
        parts.append([name, count or "half"])
    halves = [p for p in parts if p[1] == "half"]
    for i, p in enumerate(halves):
        p[1] = str(layers - layers // 2 if i == 0 else layers // 2)
    try:
        stack = tuple((name, int(count)) for name, count in parts)
    except ValueError:
        raise UsageError(f"--stack {text!r}: layer counts must be integers or 'half'") from None
    if not stack or min(c for _, c in stack) < 1 or sum(c for _, c in stack) != layers:
        raise UsageError(f"--stack {text!r}: positive layer counts summing to --layers={layers}")
    return stack


@dataclass(frozen=True)
class Config:
    """Model, training and evaluation sizes. `DEFAULT` fits 30 min on a 2-core CPU, `QUICK` 60 s."""

    train_len: int = 128
    eval_factors: tuple = (1, 2, 4, 8)
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    d_ff: int = 512
    batch: int = 16
    steps: int = 500
    lr: float = 2e-3
    warmup: int = 40
    eval_tokens: int = 32768
    seed: int = 0
    stack: str = HYBRID_STACK
    stack_bias: str = HYBRID_BIAS

    @property
    def eval_lengths(self):
        return [self.train_len * f for f in self.eval_factors]

    @property
    def span(self):
        """The longest evaluation length: the range random crops and randomized positions draw from."""
        return self.train_len * max(self.eval_factors)


DEFAULT = Config()
QUICK = Config(train_len=32, d_model=32, layers=2, heads=2, d_ff=64, batch=16, steps=150, lr=4e-3, warmup=5,
               eval_tokens=2048)


def progressive_schedule(cfg: Config):
    """`--progressive`: `[(first_step, length, batch)]`: a quarter of the steps at train_len / 4, a quarter at
    train_len / 2, the second half at train_len, the batch scaled so every step trains on the same number
    of tokens (lengths rounded down, at least 1)."""
    n = cfg.train_len
    stages = [(0, max(1, n // 4)), (cfg.steps // 4, max(1, n // 2)), (cfg.steps // 2, n)]
    return [(first, length, cfg.batch * n // length) for first, length in stages]



def with_overrides(cfg: Config, **overrides) -> Config:
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
