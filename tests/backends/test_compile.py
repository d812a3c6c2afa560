"""torch.compile with Inductor (what users run) on one case per family, and on the modules.

The conformance matrix compiles with aot_eager (same Dynamo capture, no C++ code generation) to stay
within CI's budget; this file makes sure Inductor's generated kernels agree with the spec too.
"""

from __future__ import annotations

import numpy as np
import pytest

from posenc.check.registry import all_cases
from posenc.check.run import run

torch = pytest.importorskip("torch")

FIRST_OF_FAMILY = list({c.family: c for c in reversed(all_cases()) if "float32" in c.dtypes and "jit" in c.modes}.values())


@pytest.mark.slow
@pytest.mark.parametrize("case", FIRST_OF_FAMILY, ids=[c.id for c in FIRST_OF_FAMILY])
def test_inductor_agrees_with_spec(case):
    (record,) = run([case], backends=["torch"], dtypes=["float32"], modes=["jit"], require=["torch"],
                    compile_backend="inductor")
    assert record.status == "pass", record


@pytest.mark.slow
def test_absolute_modules_compile_fullgraph_without_recompiling_on_new_positions():
    import posenc_np as pn
    import posenc_torch as pt

    sinus = pt.SinusoidalEncoding(16, max_len=64)
    learned = pt.LearnedEncoding(64, 16)
    counter = torch._dynamo.testing.CompileCounter()
    step = torch.compile(lambda p: sinus(p) + learned(p), fullgraph=True, backend=counter)
    table = learned.table.detach().numpy()
    for offset in (0, 5, 40):  # new position values, same shape: positions are data
        p = np.arange(offset, offset + 8)
        out = step(torch.tensor(p)).detach().numpy()
        np.testing.assert_allclose(out, pn.sinusoidal(p, 16) + table[p], atol=1e-6)
    assert counter.frame_count == 1
    compiled = torch.compile(lambda p: sinus(p) + learned(p), fullgraph=True)  # Inductor
    p = np.array([3, 70])  # 70 is past the sinusoid cache (computed) and the learned table (NaN)
    out = compiled(torch.tensor(p)).detach().numpy()
    np.testing.assert_allclose(out[0], pn.sinusoidal(p[:1], 16)[0] + table[3], atol=1e-6)
    assert np.isnan(out[1]).all()
