"""The ecosystem tables: every installed built-in `--impl` adapter run through the registry (RoPE, and one
table per other family it has: sinusoids, resizes, ALiBi, T5, ...), one dated JSON and the two pages generated
from it: the table with failures and findings (docs/ecosystem.md) and the
documentation site's coloured scoreboard (docs/scoreboard.md).

    python -m posenc.ecosystem [--json docs/ecosystem.json] [--markdown docs/ecosystem.md]
                                    [--scoreboard docs/scoreboard.md] [--from-json FILE] [--impl NAME ...] [--merge]

Each built-in runs in its own process (`posenc check --impl NAME --encoding rope,sinusoidal,... --json ...`): a library
may set process state (Triton's interpreter) or abort the process (a failed GGML_ASSERT), and one must not
spoil the others' rows. `--from-json` re-renders the Markdown from an existing JSON without running (the
findings, text rather than measurements, are refreshed from this module; `--json` then names where the
refreshed JSON goes, none by default);
`--merge` replaces only the named built-ins' rows of the existing JSON (for a built-in that lives in an
environment of its own: `VENV/bin/python -m posenc.ecosystem --impl vllm --merge`).

The floor above `posenc.check` and `posenc.impl`: it runs the first on the second. Each built-in's install
recipe (`INSTALL`) and findings (`FINDINGS`) live in its own module (`posenc.impl.builtin`).

JSON schema ("posenc-ecosystem/1"), one object:

* `schema`, `generated` (UTC ISO date-time), `posenc` (version), `command` (how it was made), `host`
  (platform, python, "cpu" or the GPU's name: an environment is described by versions, never directories);
* `columns`: `[{key, title, what}]`, the RoPE table's columns in order (`COLUMNS` below);
* `families`: `{family: title}`, the other families with a table each (`FAMILIES`); an implementation's
  `families` holds, per family it ran a comparison in, `summary`, `cells` (`{group: cell}`, a group being a
  convention in float32 or `bf16` / `fp16`) and `failures`;
* `implementations`: one object per implementation (a built-in may hold several), with `generated` and
  `host` of its own run, `builtin` (the `--impl` name), `name` (the records' `backend`), `distribution`,
  `installed`, `version`, `angles` (its precision class), `description`, `install` (the recipe), `summary`
  (`{pass, fail, skip, error}`), `worst_angle` (`{dtype: {radians, position, case, status}}`: the largest
  angle error against the float64 spec outside the edge set, what its precision costs where it computes),
  `cells` (`{column key: {pass, fail, skip, error, diagnoses: {name: count}, skip_reason}}`) and `failures`
  (`[{case, dtype, diagnosis, detail, err_in_tol, worst_angle, position, channel}]`); a built-in that is not
  installed, or whose run failed, has `installed: false` or `run_error` and no cells;
* `findings`: `[{implementation, title, text, reproduction}]`, upstream behaviour the checks found (the
  reproductions are a few lines each, run against the versions of the table).
"""

from __future__ import annotations

from .render import render_markdown, render_scoreboard
from .table import COLUMNS, FAMILIES, SCHEMA, collect, column_of, findings, install_recipe, merge

__all__ = ["COLUMNS", "FAMILIES", "SCHEMA", "column_of", "collect", "findings", "install_recipe", "merge", "render_markdown",
           "render_scoreboard"]
