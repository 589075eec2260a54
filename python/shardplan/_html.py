"""HTML pieces for notebooks (_repr_html_): an escaped table that fits a narrow cell, and a memory bar in SVG."""
import html

_STYLE = ("border-collapse:collapse;font:13px/1.4 system-ui,sans-serif;max-width:100%;"
          "display:block;overflow-x:auto")


def cell(value):
    """A value as table text: floats to 4 significant digits, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(rows, columns, title=None):
    """rows: dicts; columns: the keys shown, in order (headers are the keys, units in their names)."""
    head = "".join(f'<th style="text-align:left;padding:2px 8px;border-bottom:1px solid #999">{html.escape(c)}</th>'
                   for c in columns)
    body = "".join(
        "<tr>" + "".join(f'<td style="padding:2px 8px">{html.escape(cell(row.get(c)))}</td>' for c in columns)
        + "</tr>" for row in rows)
    caption = f'<caption style="text-align:left;font-weight:600">{html.escape(title)}</caption>' if title else ""
    return f'<table style="{_STYLE}">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


_COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"]


def memory_bar(gib_by_category, cap_gib, width=480):
    """A horizontal stacked bar of memory at the peak by category, with the cap as a line (SVG, scales to its box)."""
    total = sum(gib_by_category.values())
    scale = (width - 20) / max(total, cap_gib or 0, 1e-9)
    x, parts, legend = 10.0, [], []
    for i, (name, gib) in enumerate(sorted(gib_by_category.items(), key=lambda kv: -kv[1])):
        if gib <= 0:
            continue
        colour = _COLOURS[i % len(_COLOURS)]
        parts.append(f'<rect x="{x:.1f}" y="6" width="{gib * scale:.1f}" height="18" fill="{colour}">'
                     f"<title>{html.escape(name)}: {gib:.2f} GiB</title></rect>")
        legend.append(f'<span style="color:{colour}">&#9632;</span> {html.escape(name)} {gib:.2f} GiB')
        x += gib * scale
    if cap_gib:
        cx = 10 + cap_gib * scale
        parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="2" y2="28" stroke="#000" stroke-dasharray="3,2"/>')
        legend.append(f"cap {cap_gib:.2f} GiB (dashed)")
    svg = (f'<svg viewBox="0 0 {width} 30" style="width:100%;max-width:{width}px;height:auto" '
           f'role="img" aria-label="memory at peak">{"".join(parts)}</svg>')
    return f'<div style="font:12px system-ui,sans-serif">{svg}<div>{" &nbsp; ".join(legend)}</div></div>'
