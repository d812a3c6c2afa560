"""Per-layer schedule porting bugs, planted into one backend at run time: `posenc check` must turn red and name
the case and the backend (posenc/check/cases_schedule.py).

* the global layers' RoPE parameters used on a sliding layer (a port that reads one `rope_theta` for the whole
  model: Gemma 2/3 then rotate their local layers with base 1e6);
* a NoPE layer rotated (`no_rope_layers` ignored, or read the other way round: 1 means the layer *uses* RoPE);
* MLA's rope slice taken from the wrong end: the leading `qk_rope_head_dim` channels of each query head rotated
  (a partial-rotary `apply_rope`) instead of the trailing ones.
Each plant runs on one backend (a different one per plant), eager, float32: one case each, a few seconds.
"""

from __future__ import annotations

import pytest

from helpers import FAST
from posenc import adapters
from posenc.cli import main


def _global_on_sliding(module):
    original = module.rope_schedule_from_hf_config

    def planted(config):
        params = config["rope_parameters"]
        return original({**config, "rope_parameters": {kind: params["full_attention"] for kind in params}})
    return "rope_schedule_from_hf_config", planted


def _nope_rotated(module):
    original = module.rope_schedule_from_hf_config

    def planted(config):  # read the other way round (dropping the key is no plant: HF's interval default gives it)
        return original({**config, "no_rope_layers": [1 - flag for flag in config["no_rope_layers"]]})
    return "rope_schedule_from_hf_config", planted


def _mla_slice_from_the_wrong_end(module):
    def planted(q, k_pe, positions, *, qk_nope_head_dim, rotary_dim, **kwargs):
        # apply_rope with rotary_dim < head_dim rotates the LEADING channels (GPT-NeoX partial rotary)
        return (module.apply_rope(q, positions, rotary_dim=rotary_dim, **kwargs),
                module.apply_rope(k_pe, positions, rotary_dim=rotary_dim, **kwargs))
    return "apply_mla_rope", planted


PLANTS = {
    "global base on a sliding layer": (_global_on_sliding, "gemma3-sliding", "torch"),
    "NoPE layer rotated": (_nope_rotated, "llama4-nope-temperature", "jax"),
    "MLA rope slice from the wrong end": (_mla_slice_from_the_wrong_end, "deepseek-v3", "tf"),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_planted_schedule_mismatch_turns_the_run_red(plant, monkeypatch, capsys):
    make, convention, backend_name = PLANTS[plant]
    adapter = adapters.adapter(backend_name)
    if not adapter.available():
        pytest.skip(f"{backend_name} not installed")
    name, planted = make(adapter.module)
    monkeypatch.setattr(adapter.module, name, planted)
    code = main(["check", "--encoding", convention, "--backend", backend_name, "--dtype", "float32", *FAST])
    out = capsys.readouterr().out
    assert code == 1, out
    rows = [line.split() for line in out.split("PASSED")[0].splitlines()]
    # a comparison that ran and missed (FAIL), not one that raised (ERROR): the plant is a wrong value
    assert any(row[1:2] == [convention] and backend_name in row and row[-1] == "FAIL" for row in rows), out

