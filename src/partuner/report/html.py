"""A static, self-contained HTML report of one plan: Gantt chart, partition table, output check.

No JavaScript and no external CSS or fonts: the page is one file that opens anywhere. The Gantt
chart is inline SVG with two blocks, "predicted" and "measured", each with one row per unit and
one ``<rect class="part">`` per partition (``data-side`` and ``data-partition`` name it); lines
between rows are the hand-offs between units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from partuner.report.trace import Handoff, Slice

__all__ = ["gantt_svg", "render_report"]

_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]
_LABEL_W, _ROW_H, _PAD, _HEAD_H, _AXIS_H = 120, 28, 4, 24, 26

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.sub{color:#666;margin-bottom:12px} .ok{color:#1a7f37;font-weight:600}
.bad{color:#cf222e;font-weight:600} table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child,td.l,th.l{text-align:left} th{background:#f4f4f4}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:0}
dt{color:#666} dd{margin:0} svg{background:#fff;border:1px solid #ddd}
svg text{font:11px system-ui,sans-serif} .part:hover{stroke:#000;stroke-width:1.5}
"""


def _nice_step(span: float, ticks: int = 8) -> float:
    """A 1-2-5 step giving about ``ticks`` ticks over ``span``.

    Examples
    --------
    >>> _nice_step(10.0), _nice_step(0.7), _nice_step(3300)
    (2.0, 0.1, 500.0)
    """
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f}"


def gantt_svg(
    predicted: Sequence[Slice],
    measured: Sequence[Slice],
    units: Sequence[str],
    *,
    transfers: Mapping[str, Sequence[Handoff]] | None = None,
    width: int = 1100,
) -> str:
    """The Gantt chart: a "predicted" and a "measured" block, one row per unit, one
    ``rect.part`` per partition, on one time axis (ms)."""
    order = list(units)
    for s in (*predicted, *measured):
        if s.unit not in order:
            order.append(s.unit)
    color = {u: _PALETTE[k % len(_PALETTE)] for k, u in enumerate(order)}
    span = max([s.end_us for s in (*predicted, *measured)] + [1.0])
    plot_w = width - _LABEL_W - 20
    step = _nice_step(span / 1e3) * 1e3
    span = math.ceil(span / step - 1e-9) * step

    def x(us: float) -> float:
        return _LABEL_W + plot_w * us / span

    block_h = _HEAD_H + len(order) * _ROW_H
    # a plan on modeled units has nothing measured: draw the predicted block alone
    sides = (
        (("predicted", predicted), ("measured", measured))
        if measured
        else (("predicted", predicted),)
    )
    nb = len(sides)
    height = nb * block_h + _AXIS_H + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="Gantt chart">'
    ]
    k = 0.0
    while k <= span + 1e-9:  # grid and axis
        out.append(
            f'<line x1="{x(k):.1f}" y1="0" x2="{x(k):.1f}" y2="{nb * block_h}" stroke="#eee"/>'
            f'<text x="{x(k):.1f}" y="{nb * block_h + 16}" text-anchor="middle" '
            f'fill="#555">{k / 1e3:g}</text>'
        )
        k += step
    out.append(f'<text x="6" y="{nb * block_h + 16}" fill="#555">time (ms)</text>')
    for b, (side, slices) in enumerate(sides):
        top = b * block_h
        out.append(f'<text x="6" y="{top + 16}" font-weight="bold" fill="#333">{side}</text>')
        row = {u: top + _HEAD_H + r * _ROW_H for r, u in enumerate(order)}
        for u, y in row.items():
            out.append(
                f'<line x1="{_LABEL_W}" y1="{y + _ROW_H - 1}" x2="{width - 20}" '
                f'y2="{y + _ROW_H - 1}" stroke="#ddd"/>'
                f'<text x="12" y="{y + _ROW_H / 2 + 4}" fill="#333">{escape(u)}</text>'
            )
        at = {s.partition: s for s in slices}
        for h in (transfers or {}).get(side, ()):
            src, dst = at.get(h.src_partition), at.get(h.dst_partition)
            if src is None or dst is None:
                continue
            out.append(
                f'<line class="xfer" x1="{x(h.ready_us):.1f}" y1="{row[src.unit] + _ROW_H / 2}" '
                f'x2="{x(h.taken_us):.1f}" y2="{row[dst.unit] + _ROW_H / 2}" stroke="#999" '
                f'stroke-dasharray="3,2"><title>{escape(h.value)}: {h.nbytes} B, '
                f"{escape(h.src_unit)} -&gt; {escape(h.dst_unit)}</title></line>"
            )
        for s in slices:
            x0, w = x(s.start_us), max(x(s.end_us) - x(s.start_us), 1.0)
            y = row[s.unit] + _PAD
            tip = (
                f"{s.partition} on {s.unit} ({side}): {_ms(s.start_us)} - {_ms(s.end_us)} ms, "
                f"{_ms(s.end_us - s.start_us)} ms, {s.nodes} nodes"
            )
            out.append(
                f'<rect class="part" data-side="{side}" data-partition="{escape(s.partition)}" '
                f'x="{x0:.2f}" y="{y}" width="{w:.2f}" height="{_ROW_H - 2 * _PAD - 1}" '
                f'fill="{color[s.unit]}" fill-opacity="{0.55 if side == "predicted" else 0.9}" '
                f'rx="2"><title>{escape(tip)}</title></rect>'
            )
            if w > 8 * len(s.partition) + 4:
                out.append(
                    f'<text x="{x0 + 3:.1f}" y="{y + _ROW_H / 2}" fill="#fff" '
                    f'pointer-events="none">{escape(s.partition)}</text>'
                )
    out.append("</svg>")
    return "\n".join(out)


def _cell(value: Any, fmt: str = "{:.3f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, int) and not isinstance(value, bool) and fmt == "{:.3f}":
        return str(value)
    return escape(fmt.format(value) if isinstance(value, int | float) else str(value))


def _check_html(check: Mapping[str, Any] | None) -> str:
    if not check:
        return "<p>No check was run.</p>"
    ok = check["passed"]
    verdict = '<span class="ok">passed</span>' if ok else '<span class="bad">FAILED</span>'
    rows = "".join(
        f"<tr><td>{escape(o['name'])}</td><td>{_cell(o['max_abs'], '{:.3g}')}</td>"
        f"<td>{_cell(o['max_rel'], '{:.3g}')}</td><td>{_cell(o['cosine'], '{:.6f}')}</td>"
        f"<td>{_cell(None if o['top1_agree'] is None else 100 * o['top1_agree'], '{:.0f}%')}"
        f"</td><td>{'yes' if o['passed'] else 'no'}</td></tr>"
        for o in check.get("outputs", [])
    )
    return (
        f"<p>Output check {verdict} (rule {escape(str(check.get('rule', '')))}).</p>"
        "<table><tr><th>output</th><th>max abs</th><th>max rel</th><th>cosine</th>"
        f"<th>top-1 agreement</th><th>passed</th></tr>{rows}</table>"
    )


def render_report(
    *,
    title: str,
    summary: Mapping[str, Any],
    predicted: Sequence[Slice],
    measured: Sequence[Slice],
    units: Sequence[str],
    partitions: Sequence[Mapping[str, Any]],
    check: Mapping[str, Any] | None = None,
    transfers: Mapping[str, Sequence[Handoff]] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The report page.

    ``summary`` is shown as a definition list (label -> value); ``partitions`` rows have
    ``name, unit, nodes, predicted_start_ms, predicted_ms, measured_ms`` (others ignored);
    ``transfers`` maps ``"predicted"``/``"measured"`` to hand-offs drawn on the chart.
    """
    dl = "".join(f"<dt>{escape(str(k))}</dt><dd>{_cell(v)}</dd>" for k, v in summary.items())
    rows = []
    for p in partitions:
        pred, meas = p.get("predicted_ms"), p.get("measured_ms")
        ratio = meas / pred if isinstance(pred, float) and pred > 0 and meas is not None else None
        rows.append(
            f"<tr><td>{escape(p['name'])}</td><td class='l'>{escape(p['unit'])}</td>"
            f"<td>{_cell(p.get('nodes'), '{}')}</td><td>{_cell(p.get('predicted_start_ms'))}</td>"
            f"<td>{_cell(pred)}</td><td>{_cell(meas)}</td><td>{_cell(ratio, '{:.2f}')}</td></tr>"
        )
    note_html = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{escape(title)}</h1>",
            '<div class="sub">partuner plan report: predicted vs measured</div>',
            f"<dl>{dl}</dl>",
            f"<ul>{note_html}</ul>" if note_html else "",
            "<h2>Timeline</h2>",
            gantt_svg(predicted, measured, units, transfers=transfers),
            "<p class='sub'>Measured: the run of median latency among the traced runs. Dashed "
            "lines: values handed between units. Hover a bar for its times.</p>",
            "<h2>Partitions</h2>",
            "<table><tr><th>partition</th><th class='l'>unit</th><th>nodes</th>"
            "<th>predicted start ms</th><th>predicted ms</th><th>measured ms (median)</th>"
            f"<th>measured / predicted</th></tr>{''.join(rows)}</table>",
            "<h2>Output check</h2>",
            _check_html(check),
            "</body></html>",
        ]
    )
