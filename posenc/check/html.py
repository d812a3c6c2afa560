"""`posenc check --html`: one self-contained page from the JSON report.

The page is built from the same dictionary `report.json_report` writes, so a saved JSON file renders the
same page (`render_html(json.load(f))`). Everything is inline (styles, script, figures as SVG): the page
makes no request. Each comparison of the JSON is exactly one element with a `data-status` attribute (a
cell of the matrix), so a browser test can count and filter them; the failures list repeats the failing
ones with their tolerance derivation and diagnosis under `data-failure` instead.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter

__all__ = ["render_html", "cell_colour", "ERR_TOL_FLOOR"]

_DTYPE_ORDER = ("float32", "bfloat16", "float16", "float64")
_MODE_ORDER = ("eager", "jit")
_STATUS_ORDER = ("error", "fail", "pass", "skip")
#: err/tol at or below this is the palest green: the scale runs over three decades up to the tolerance.
ERR_TOL_FLOOR = 1e-3


def cell_colour(status: str, err_in_tol) -> str:
    """The one colour scale of the matrix: passes from pale green (err/tol <= 1e-3) to yellow at
    err/tol = 1 (log scale), failures red (darker past 10x), errors purple, skips grey."""
    if status == "skip":
        return "#e4e4e4"
    if status == "error":
        return "#7b3294"
    if err_in_tol is None or not math.isfinite(err_in_tol):
        return "#a50f15" if status == "fail" else "#e4e4e4"
    if status == "fail":
        return "#a50f15" if err_in_tol > 10 else "#de2d26"
    v = min(max((math.log10(max(err_in_tol, 1e-300)) - math.log10(ERR_TOL_FLOOR)) / -math.log10(ERR_TOL_FLOOR),
                0.0), 1.0)
    hue = 120 - 72 * v
    light = 86 - 24 * v
    return f"hsl({hue:.0f},70%,{light:.0f}%)"


def _esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _num(x, fmt="{:.3g}") -> str:
    if x is None:
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return fmt.format(x)


def _order(values, preferred):
    known = [v for v in preferred if v in values]
    return known + sorted(v for v in values if v not in preferred)


def _columns(records):
    """(backend, dtype, mode) in the order the run listed backends, then dtype and mode orders."""
    backends = list(dict.fromkeys(r["backend"] for r in records))
    dtypes = _order({r["dtype"] for r in records}, _DTYPE_ORDER)
    modes = _order({r["mode"] for r in records}, _MODE_ORDER)
    present = {(r["backend"], r["dtype"], r["mode"]) for r in records}
    return [(b, d, m) for b in backends for d in dtypes for m in modes if (b, d, m) in present]


def _hover(r) -> str:
    if r["status"] == "skip":
        return f"skipped: {r.get('message', '')}"
    parts = [f"{r['backend']} {r['dtype']} {r['mode']}: {r['status']}"]
    if r.get("err_in_tol") is not None:
        parts.append(f"err/tol {_num(r['err_in_tol'])}")
    if r.get("max_abs_err") is not None:
        parts.append(f"max err {_num(r['max_abs_err'])}")
    if r.get("tol") is not None:
        parts.append(f"tol {_num(r['tol'])}")
    for key in sorted(k for k in r if "angle" in k and r[k] is not None and not isinstance(r[k], (list, dict))):
        parts.append(f"{key} {_num(r[key]) if isinstance(r[key], float) else r[key]}")
    if r.get("diagnosis"):
        parts.append(f"diagnosis: {r['diagnosis']}")
    if r["status"] in ("fail", "error") and r.get("message"):
        parts.append(r["message"])
    return "; ".join(parts)


def _cell(r) -> str:
    mark = {"fail": "&#x2717;", "error": "!", "skip": "&#x2013;"}.get(r["status"], "")
    return (f'<td class="c" data-status="{r["status"]}" data-backend="{_esc(r["backend"])}" '
            f'data-err-tol="{_num(r.get("err_in_tol"), "{:.4g}")}" style="background:'
            f'{cell_colour(r["status"], r.get("err_in_tol"))}" title="{_esc(_hover(r))}">{mark}</td>')


def _matrix(records) -> str:
    columns = _columns(records)
    index = {c: i for i, c in enumerate(columns)}
    rows: dict = {}
    for r in records:
        rows.setdefault((r["family"], r["convention"], r["case"]), []).append(r)
    head = ['<tr><th rowspan="3" class="rowhead">family / convention / case set</th>']
    for backend in dict.fromkeys(b for b, _, _ in columns):
        span = sum(1 for c in columns if c[0] == backend)
        head.append(f'<th colspan="{span}" data-col-backend="{_esc(backend)}">{_esc(backend)}</th>')
    head.append("</tr><tr>")
    for (backend, dtype) in dict.fromkeys((b, d) for b, d, _ in columns):
        span = sum(1 for c in columns if c[:2] == (backend, dtype))
        head.append(f'<th colspan="{span}" data-col-backend="{_esc(backend)}">{_esc(dtype)}</th>')
    head.append("</tr><tr>")
    for backend, _, mode in columns:
        head.append(f'<th data-col-backend="{_esc(backend)}">{_esc(mode)}</th>')
    head.append("</tr>")
    body = []
    for (family, convention, case), rs in rows.items():
        cells = [[] for _ in columns]
        for r in rs:
            cells[index[(r["backend"], r["dtype"], r["mode"])]].append(_cell(r))
        statuses = " ".join(sorted({r["status"] for r in rs}))
        tds = "".join("".join(c) if c else f'<td class="n" data-col-backend="{_esc(col[0])}"></td>'
                      for c, col in zip(cells, columns, strict=True))
        body.append(f'<tr class="case" data-family="{_esc(family)}" data-statuses="{statuses}">'
                    f'<th class="rowhead">{_esc(family)} / {_esc(convention)} / {_esc(case)}</th>{tds}</tr>')
    return ('<table id="matrix"><thead>' + "".join(head) + "</thead><tbody>" + "".join(body) + "</tbody></table>")


def _failures(records) -> str:
    bad = [r for r in records if r["status"] in ("fail", "error")]
    if not bad:
        return '<p id="no-failures">No failures.</p>'
    items = []
    for r in sorted(bad, key=lambda r: (_STATUS_ORDER.index(r["status"]), r["family"], r["convention"],
                                         r["case"], r["backend"], r["dtype"], r["mode"])):
        where = f" at index {tuple(r['worst_index'])}" if r.get("worst_index") else ""
        lines = [f'<b>{_esc(r["family"])} / {_esc(r["convention"])} / {_esc(r["case"])}</b> '
                 f'{_esc(r["backend"])} {_esc(r["dtype"])} {_esc(r["mode"])}: {r["status"].upper()}']
        if r.get("diagnosis"):
            lines.append(f'<span class="diagnosis">diagnosis: {_esc(r["diagnosis"])}</span>'
                         + (f" &mdash; {_esc(r['diagnosis_detail'])}" if r.get("diagnosis_detail") else ""))
        if r.get("worst_angle_err") is not None:
            lines.append(f"worst angle error {_num(r['worst_angle_err'])} rad at position "
                         f"{_esc(r.get('worst_angle_position'))}")
        if r.get("max_abs_err") is not None:
            lines.append(f"max err {_num(r['max_abs_err'])}{_esc(where)}, tol {_num(r.get('tol'))}, "
                         f"err/tol {_num(r.get('err_in_tol'))}")
        if r.get("tol_why"):
            lines.append(f"tolerance: {_esc(r['tol_why'])}")
        if r.get("message"):
            lines.append(_esc(r["message"]))
        items.append(f'<li data-failure="{r["status"]}">' + "<br>".join(lines) + "</li>")
    return f'<ol id="failure-list">{"".join(items)}</ol>'


def _settings(report) -> str:
    rows = [("command", "posenc " + " ".join(report.get("argv") or [])), ("seed", report.get("seed")),
            ("device", report.get("device", "cpu")),
            ("seconds", report.get("seconds")), ("python", report.get("python"))]
    rows += [(name, version) for name, version in sorted((report.get("versions") or {}).items())]
    return ('<table id="settings">' + "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
            + "</table>")


def _position_profiles(records):
    """{dtype: {label: [(position, err), ...]}} from the records that carry `error_by_position`."""
    profiles: dict = {}
    for r in records:
        points = r.get("error_by_position")
        if not points or r["family"] != "rope" or r["case"] != "long":
            continue
        label = f"{r['backend']} {r['mode']}"
        curve = profiles.setdefault(r["dtype"], {}).setdefault(label, {})
        for position, err in points:
            curve[position] = max(curve.get(position, 0.0), err)
    return {d: {k: sorted(v.items()) for k, v in curves.items()} for d, curves in profiles.items()}


_PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
            "#1f78b4", "#b2df8a", "#fb9a99", "#cab2d6")


def _svg_chart(dtype, curves, width=640, height=300) -> str:
    """Log-log error against position, one polyline per implementation and mode (position 0 drawn at 1)."""
    pad_l, pad_r, pad_t, pad_b = 60, 170, 24, 36
    xs = [max(p, 1) for c in curves.values() for p, _ in c]
    ys = [e for c in curves.values() for _, e in c if e > 0]
    if not xs or not ys:
        return ""
    x0, x1 = 0.0, math.log10(max(xs)) or 1.0
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    y1 = y1 if y1 > y0 else y0 + 1

    def sx(p):
        return pad_l + (math.log10(max(p, 1)) - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def sy(e):
        return height - pad_b - (math.log10(max(e, 10.0 ** y0)) - y0) / (y1 - y0) * (height - pad_t - pad_b)

    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" '
             f'aria-label="max error against position, {dtype}">',
             f'<text x="{pad_l}" y="16" class="ct">rope / long, {_esc(dtype)}: max |error| against position</text>']
    for k in range(int(y0), int(y1) + 1):
        y = sy(10.0 ** k)
        parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{pad_l - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">1e{k}</text>')
    for k in range(0, int(math.ceil(x1)) + 1):
        x = pad_l + (k - x0) / (x1 - x0) * (width - pad_l - pad_r)
        if x <= width - pad_r + 1:
            parts.append(f'<text x="{x:.1f}" y="{height - pad_b + 16}" class="tick" text-anchor="middle">'
                         f'1e{k}</text>')
    for i, (label, points) in enumerate(sorted(curves.items())):
        colour = _PALETTE[i % len(_PALETTE)]
        path = " ".join(f"{sx(p):.1f},{sy(e):.1f}" for p, e in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
        parts.append(f'<text x="{width - pad_r + 8}" y="{pad_t + 14 * i + 8}" fill="{colour}" class="tick">'
                     f'{_esc(label)}</text>')
    parts.append(f'<text x="{(width - pad_r + pad_l) / 2:.0f}" y="{height - 4}" class="tick" '
                 'text-anchor="middle">position</text></svg>')
    return "".join(parts)


def _positions_section(records) -> str:
    profiles = _position_profiles(records)
    if not profiles:
        return ""
    charts = "".join(_svg_chart(d, profiles[d]) for d in _order(set(profiles), _DTYPE_ORDER))
    return ('<section id="positions"><h2>Error against position (RoPE, case set "long")</h2>'
            '<p>The worst absolute error of each position over the RoPE conventions: an error that grows with '
            "position is an angle formed in low precision.</p>" + charts + "</section>")


def _filters(records) -> str:
    def select(name, values):
        options = "".join(f'<option value="{_esc(v)}">{_esc(v)}</option>' for v in values)
        return (f'<label>{name} <select id="filter-{name}" data-filter="{name}">'
                f'<option value="">all</option>{options}</select></label>')

    families = list(dict.fromkeys(r["family"] for r in records))
    backends = list(dict.fromkeys(r["backend"] for r in records))
    statuses = [s for s in _STATUS_ORDER if any(r["status"] == s for r in records)]
    return '<div id="filters">' + select("family", families) + select("backend", backends) + \
        select("status", statuses) + ' <span id="shown"></span></div>'


def _legend() -> str:
    stops = [("err/tol &le; 1e-3", cell_colour("pass", 1e-3)), ("1e-2", cell_colour("pass", 1e-2)),
             ("0.1", cell_colour("pass", 0.1)), ("1 (limit)", cell_colour("pass", 1.0)),
             ("fail", cell_colour("fail", 2.0)), ("fail &gt; 10x", cell_colour("fail", 20.0)),
             ("error", cell_colour("error", None)), ("skip", cell_colour("skip", None))]
    return '<div id="legend">' + "".join(f'<span class="sw" style="background:{c}"></span>{t} ' for t, c in stops) + \
        "</div>"


_STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em;margin:0 0 .3em} h2{font-size:1.15em;margin:1.2em 0 .4em}
#summary{font:600 1.1em ui-monospace,Menlo,Consolas,monospace;padding:.5em .8em;border-radius:4px;
 background:#eef6ee;display:inline-block} #summary.bad{background:#fbe3e3}
#settings th{text-align:left;padding-right:1em;font-weight:600} #settings td{font-family:ui-monospace,monospace}
#failure-list li{margin:.4em 0} .diagnosis{font-weight:600;color:#a50f15}
#filters{margin:.6em 0} #filters label{margin-right:1em}
#legend{margin:.4em 0;font-size:12px} .sw{display:inline-block;width:14px;height:12px;margin:0 3px 0 8px;
 vertical-align:middle;border:1px solid #bbb}
.wrap{overflow:auto;max-height:80vh;border:1px solid #ddd}
#matrix{border-collapse:collapse;font-size:11px}
#matrix th{background:#f6f6f6;position:sticky;top:0;padding:2px 4px;border:1px solid #ddd;white-space:nowrap}
#matrix th.rowhead{position:sticky;left:0;text-align:left;background:#fafafa;z-index:1}
#matrix td{width:14px;min-width:14px;height:14px;border:1px solid #fff;text-align:center;padding:0;color:#fff;
 font-size:10px}
#matrix td.n{background:#fff}
tr.hidden,td.hidden,th.hidden{display:none} td.dim{opacity:.12}
.chart .grid{stroke:#e5e5e5} .chart .tick{font-size:11px;fill:#444} .chart .ct{font-size:12px;font-weight:600}
"""

_SCRIPT = """
(function(){
 var sel=function(n){return document.getElementById('filter-'+n);};
 function apply(){
  var fam=sel('family').value, be=sel('backend').value, st=sel('status').value, shown=0;
  document.querySelectorAll('[data-col-backend]').forEach(function(e){
   e.classList.toggle('hidden', be!=='' && e.getAttribute('data-col-backend')!==be);});
  document.querySelectorAll('#matrix tr.case').forEach(function(row){
   var visible=0;
   row.querySelectorAll('td[data-status]').forEach(function(td){
    var keepB=be==='' || td.getAttribute('data-backend')===be;
    var keepS=st==='' || td.getAttribute('data-status')===st;
    td.classList.toggle('hidden', !keepB); td.classList.toggle('dim', keepB && !keepS);
    if(keepB && keepS) visible++;});
   var hide=(fam!=='' && row.getAttribute('data-family')!==fam) || visible===0;
   row.classList.toggle('hidden', hide); if(!hide) shown++;});
  document.getElementById('shown').textContent=shown+' rows shown';
 }
 ['family','backend','status'].forEach(function(n){sel(n).addEventListener('change',apply);});
 apply();
})();
"""


def render_html(report: dict) -> str:
    """The page for one `posenc check` JSON report (the dictionary `report.json_report` serialises).

    `report["summary_line"]`, when present, is shown verbatim (the terminal's last line); otherwise the
    line is rebuilt from the records' counts in the same words.
    """
    records = report["records"]
    counts = Counter(r["status"] for r in records)
    line = report.get("summary_line") or (f"{counts['pass']} passed, {counts['fail'] + counts['error']} failed, "
                                          f"{counts['skip']} skipped")
    bad = counts["fail"] + counts["error"]
    body = [f'<h1>posenc check</h1><p id="summary" class="{"bad" if bad else "good"}">{_esc(line)}</p>',
            '<h2>Settings and versions</h2>', _settings(report),
            f'<h2>Failures ({bad})</h2>', _failures(records),
            '<h2>Matrix</h2><p>One row per case (family / convention / case set), one column per implementation '
            "&times; dtype &times; mode; each cell is one comparison coloured by err/tol (hover for the numbers, "
            "a skip shows its reason).</p>", _legend(), _filters(records),
            f'<div class="wrap">{_matrix(records)}</div>', _positions_section(records)]
    data = json.dumps(dict(counts), sort_keys=True)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>posenc check: {_esc(line)}</title><style>{_STYLE}</style></head>"
            f"<body data-counts='{_esc(data)}'>" + "".join(body) + f"<script>{_SCRIPT}</script></body></html>\n")
