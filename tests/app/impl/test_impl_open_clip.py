"""`posenc check --impl open-clip --encoding resize`: open_clip 3.3.0's `resize_pos_embed` / `resize_text_pos_embed`
pass every resize case they can express, and every other case is a skip naming the setting open_clip cannot take.
"""

from __future__ import annotations

import pytest

from posenc.check.registry import all_cases
from posenc.check.run_impl import run_implementations
from posenc.impl.builtin import builtin_status, load_builtin

pytestmark = pytest.mark.skipif(not builtin_status("open-clip")[0], reason="open_clip is not installed")

#: what the registry's resize cases need that open_clip's functions cannot take (see open_clip.py's docstring)
SKIP_REASONS = ("resize_pos_embed keeps exactly one prefix row", "resize_pos_embed takes the old grid as square",
                "resize_pos_embed samples on the size grid", "resize_pos_embed passes align_corners=False",
                "open_clip's bicubic is PyTorch's", "resize_text_pos_embed is a 1-D F.interpolate",
                "resize_text_pos_embed samples on the size grid", "F.interpolate antialiases only 4-D",
                "F.interpolate refuses it")


def test_open_clip_check_passes_what_it_expresses_and_names_its_skips():
    (impl,) = load_builtin("open-clip")
    cases = [c for c in all_cases() if c.family == "resize" and c.fn is None]
    records = run_implementations(cases, [impl], dtypes=["float32", "bfloat16", "float16"])
    bad = [(r.convention, r.case, r.dtype, r.status, r.message[:120]) for r in records if r.status in ("fail", "error")]
    assert not bad
    passed = {(r.convention, r.case) for r in records if r.status == "pass"}
    # the antialiased bicubic grid (open_clip's own call), HF's plain bicubic, and the text tower's linear both ways
    assert {("dinov2-reg", "6x6->9x9"), ("hf-vit", "7x7->10x10"), ("linear", "24->64"), ("linear", "64->24")} <= passed
    unexplained = [(r.convention, r.case, r.message) for r in records if r.status == "skip"
                   and not any(reason in r.message for reason in SKIP_REASONS)]
    assert not unexplained
    # half precision with antialias has no CPU kernel: a skip, not an error
    half = [r for r in records if (r.convention, r.case) == ("dinov2-reg", "6x6->9x9") and r.dtype != "float32"]
    assert half and all(r.status == "skip" and "F.interpolate refuses it" in r.message for r in half)


def test_open_clip_is_listed_with_its_version():
    (impl,) = load_builtin("open-clip")
    assert impl.name == "open-clip" and impl.version == builtin_status("open-clip")[1]
    assert set(impl.functions) == {"resize_grid", "resize_table"}
