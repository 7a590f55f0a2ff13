"""The report as one self-contained HTML file: summary and histogram drawn here as static
HTML and inline SVG, the rows and timelines drawn by the inlined script from embedded JSON.

Nothing on the page is fetched: the Content-Security-Policy allows no network source at all,
only the page's own script (by its hash), inline style and data: images. Record text reaches
the page only as escaped HTML (here) or as JSON that the script sets with textContent.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any

from vqa.aggregate import CATEGORIES
from vqa.types import DEFECT_TYPES
from vqa.words import counted

from ._assets import SCRIPT, STYLE
from ._data import HISTOGRAM_BIN

PAGE_SIZE = 50  # rows drawn at a time, each with its timeline
COLORS = {"blur": "#7c3aed", "noise": "#db2777", "compression": "#ea580c", "low_resolution": "#0891b2",
          "dark": "#374151", "overexposed": "#ca8a04", "frozen": "#2563eb", "black": "#111111"}
CATEGORY_COLORS = {"excellent": "#1a7f37", "good": "#65a30d", "fair": "#d97706", "poor": "#ea580c", "bad": "#b91c1c",
                   "": "#9ca3af"}  # "": a scored record with no category it could carry
_COLUMNS = (("i", "#"), ("path", "path"), ("status", "status"), ("score", "score"), ("category", "category"),
            ("defects", "defects"), ("duration_s", "duration"), ("resolution", "resolution"), ("codec", "codec"),
            ("message", "error / warnings"))


def _e(x: Any) -> str:
    # A non-UTF-8 name's bytes (lone surrogates) are shown as \udcXX, never written raw.
    text = str(x).encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(text, quote=True)


def embed_json(data: Any) -> str:
    """JSON safe inside <script type="application/json">: no '<', '>' or '&' (so no '</script>'
    or '<!--'), ASCII only (lone surrogates of non-UTF-8 names and U+2028 come as \\u escapes)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def histogram_svg(bins: list[dict[str, int]], *, width: int = 420, height: int = 120) -> str:
    """The score histogram: one ``g.bin`` per bar, stacked from the worst category up, each
    part (``rect.bar``) in the colour of the category its records give (``histogram_categories``)."""
    totals = [sum(counts.values()) for counts in bins]
    top = max(totals) if any(totals) else 1
    plot = width - 40  # 25 px of counts on the left, 15 on the right for the "100" label's half
    bar = plot / len(bins)
    parts = [f'<svg class="histogram" width="{width}" height="{height + 18}" viewBox="0 0 {width} {height + 18}" '
             'role="img"><title>score histogram</title>']
    for k, counts in enumerate(bins):
        lo = k * HISTOGRAM_BIN
        split = ", ".join(f"{n} {name or 'no category'}" for name, n in counts.items())
        parts.append(f'<g class="bin"><title>{lo}\u2013{lo + HISTOGRAM_BIN}: {counted(totals[k], "video")}'
                     f'{f" ({_e(split)})" if len(counts) > 1 else ""}</title>')
        y = float(height)
        for name, n in reversed(counts.items()):
            h = height * n / top
            y -= h
            parts.append(f'<rect class="bar" data-category="{_e(name)}" x="{25 + k * bar:.1f}" y="{y:.1f}" '
                         f'width="{bar - 1:.1f}" height="{h:.1f}" fill="{CATEGORY_COLORS[name]}"></rect>')
        parts.append("</g>")
    for s in range(0, 101, 20):
        x = 25 + plot * s / 100
        parts.append(f'<text x="{x:.1f}" y="{height + 13}" font-size="10" text-anchor="middle" fill="#666">{s}</text>')
    parts.append(f'<text x="20" y="10" font-size="10" text-anchor="end" fill="#666">{top}</text></svg>')
    return "".join(parts)


def _counts(title: str, items: list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items)
    return f'<div class="card"><h2>{_e(title)}</h2><table class="counts">{rows}</table></div>'


def _setups(setups: list) -> str:
    if not setups:
        return ""
    rows = []
    for setup, n in setups:
        model, config = setup["model"], setup["config"]
        name = " ".join(str(model.get(k)) for k in ("name", "version") if model.get(k) is not None)
        sha = str(model.get("sha256") or "")[:12]
        options = ", ".join(f"{k}={v}" for k, v in config.items())
        rows.append(f"<tr><th>{_e(name)} <small>{_e(sha)}</small></th><td>{counted(n, 'video')}</td>"
                    f"<td style='text-align:left'>{_e(options)}</td></tr>")
    return f'<div class="card"><h2>Model and options</h2><table class="counts">{"".join(rows)}</table></div>'


def _summary(s: dict[str, Any]) -> str:
    status = [("videos", s["videos"]), ("ok", s["status"].get("ok", 0)), ("failed", s["status"].get("error", 0)),
              ("mean score", "\u2013" if s["mean_score"] is None else s["mean_score"]),
              ("with a timeline", s["with_timeline"])]
    defects = [(t, f"{counted(s['defect_videos'][t], 'video')}, {counted(s['defect_segments'][t], 'segment')}")
               for t in DEFECT_TYPES]
    errors = list(s["errors"].items()) or [("none", 0)]
    return ('<section id="summary"><div class="cards">'
            + _counts("Videos", status) + _counts("Categories", list(s["categories"].items()))
            + _counts("Defects", defects) + _counts("Failures by error code", errors)
            + f'<div class="card"><h2>Scores</h2>{histogram_svg(s["histogram_categories"])}</div>'
            + _setups(s["setups"]) + "</div></section>")


def _select(ident: str, label: str, options: list[str]) -> str:
    opts = "".join(f'<option value="{_e(o)}">{_e(o)}</option>' for o in options)
    return f'<label>{_e(label)} <select id="{ident}"><option value="">any</option>{opts}</select></label>'


def content_security_policy() -> str:
    """The page's policy: no network source, only its own script (by digest), inline style and
    ``data:`` images. In the page's <meta>, and in the header of a server that sends it."""
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def render(rows: list[dict[str, Any]], summary: dict[str, Any], thumbs: dict[int, list[dict]], *,
           title: str = "vqa report", source: str = "") -> str:
    data = {"rows": rows, "thumbs": {str(k): v for k, v in thumbs.items()}, "colors": COLORS,
            "page_size": PAGE_SIZE}
    csp = content_security_policy()
    controls = ('<div id="controls"><input id="f-text" type="search" placeholder="path or message contains">'
                + _select("f-status", "status", ["ok", "error"]) + _select("f-category", "category", list(CATEGORIES))
                + _select("f-defect", "defect", list(DEFECT_TYPES))
                + '<label>score <input id="f-min" type="number" min="0" max="100" placeholder="min"> to '
                  '<input id="f-max" type="number" min="0" max="100" placeholder="max"></label>'
                  '<span id="pager"><button id="prev">&lt; prev</button><span id="shown"></span>'
                  '<button id="next">next &gt;</button></span></div>')
    head = "".join(f'<th data-key="{k}">{_e(label)}</th>' for k, label in _COLUMNS)
    legend = "".join(f'<span style="color:{c}">\u25A0 {_e(t)}</span>' for t, c in COLORS.items())
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">'
            f'<meta name="viewport" content="width=device-width"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body>"
            f"<h1>{_e(title)}</h1><p>{_e(source)}</p><div id=\"js-errors\"></div>"
            + _summary(summary)
            + f'<h2>Videos</h2><p class="legend">{legend} &nbsp; timeline: blue line score per sampled frame '
              "(ticks: sampled positions), dashed: defect probabilities, shaded: frozen/black frames, "
              "bars below: defect segments (darker: more severe)</p>"
            + controls + f'<table id="videos"><thead><tr>{head}</tr></thead><tbody id="rows"></tbody></table>'
            + f'<script id="vqa-data" type="application/json">{embed_json(data)}</script>'
            + f"<script>{SCRIPT}</script></body></html>\n")
