"""Issue 17: the report page in a real browser (headless Chromium), as a person reads it: file
names are not broken mid-word when other columns widen, the histogram's "100" is not clipped,
timeline lanes carry their whole defect names, and a malformed address fragment falls back to
the default view. Layout is measured by a script the test adds to a copy of the page; the
screenshots go to test-artifacts/ for a person to look at."""
from __future__ import annotations

import base64
import hashlib
import json

import pytest
from tests.support.browser import ARTIFACTS, open_page, parse
from tests.support.synthetic_records import category, synthetic_records

from vqa.report_html import write_report

pytestmark = pytest.mark.slow

# Written into the copy of the page after its own script ran: what the tests measure.
MEASURE = r"""<script>
(function(){
  function lines(node){var r=document.createRange();r.selectNodeContents(node);var tops={};
    Array.prototype.forEach.call(r.getClientRects(),function(b){if(b.width>0)tops[Math.round(b.top)]=1;});
    return Object.keys(tops).length;}
  var m={paths:[],clipped:[],lanes:[],bars:[]};
  // The cell's last text: the file name (a name of up to 30 characters is one text).
  document.querySelectorAll('td.path').forEach(function(td){
    m.paths.push({text:td.textContent,name:td.lastChild.textContent,lines:lines(td.lastChild)});});
  document.querySelectorAll('svg.histogram text, svg.timeline text').forEach(function(t){
    var svg=t.ownerSVGElement,b=t.getBBox(),w=svg.viewBox.baseVal.width;
    if(b.x<0||b.x+b.width>w+0.5)m.clipped.push(t.textContent);});
  document.querySelectorAll('svg.timeline text[font-size="8"]').forEach(function(t){m.lanes.push(t.textContent);});
  document.querySelectorAll('svg.histogram rect.bar').forEach(function(r){var b=r.getBBox();
    m.bars.push({x:b.x,height:b.height,fill:getComputedStyle(r).fill});});
  document.body.setAttribute('data-measure',JSON.stringify(m));
})();
</script>"""

NAMES = ["uploads/2024/interview_final_cut.mp4", "uploads/2024/product-launch-teaser.mov",
         "uploads/2024/wedding_highlights_4k.mkv"]


def _records() -> list[dict]:
    records = synthetic_records(3, with_timeline=True)
    for r, name in zip(records, NAMES):
        r["path"] = name
    ok = [r for r in records if r["status"] == "ok"]
    # Wide neighbours: many defect chips, a long warning without spaces.
    ok[0]["defects"] = [{"type": t, "severity": 0.9, "start_s": 0.5, "end_s": 1.5}
                        for t in ("low_resolution", "compression", "overexposed", "noise", "blur", "frozen")]
    ok[0]["warnings"] = ["W_VARIABLE_FPS:" + "x" * 300]
    ok[0]["score"] = 100.0  # the histogram's last bar, under its "100"
    records.append({**ok[0], "path": "uploads/2024/" + "very_long_name_" * 12 + ".mp4"})
    return records


def _measured(tmp_path, name: str, records, fragment: str = ""):
    out = tmp_path / f"{name}.html"
    write_report(records, out, thumbnails=0)
    measured = tmp_path / f"{name}-measured.html"
    body = MEASURE[len("<script>"):-len("</script>")]
    allowed = "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
    html = out.read_text().replace("script-src ", f"script-src {allowed} ", 1)  # the page's CSP
    measured.write_text(html.replace("</body>", MEASURE + "</body>"))
    page = open_page(measured, fragment=fragment, sized=True, screenshot=ARTIFACTS / f"layout-{name}.png")
    assert page.console_errors == [], page.console
    return page, json.loads(page.dom.split("data-measure=\"")[1].split("\"")[0].replace("&quot;", "\""))


def test_file_names_are_not_broken_mid_word_when_other_columns_widen(tmp_path):
    _page, m = _measured(tmp_path, "paths", _records())
    short = [p for p in m["paths"] if p["text"] in NAMES]
    assert len(short) == 3, m["paths"]
    for p in short:  # the whole file name, on one line
        assert p["name"] == p["text"].rsplit("/", 1)[1] and p["lines"] == 1, p


def test_no_chart_label_is_clipped_and_lanes_carry_whole_names(tmp_path):
    _page, m = _measured(tmp_path, "labels", _records())
    assert m["clipped"] == []
    assert "low_resolution" in m["lanes"] and "compression" in m["lanes"], m["lanes"]


def test_the_histogram_bars_carry_the_colour_of_the_category_the_records_give(tmp_path):
    from vqa.report_html._page import CATEGORY_COLORS

    scores = [97.0, 92.0, 85.0, 85.5, 74.0, 66.0, 52.0, 41.0, 33.0, 12.0]
    records = [r for r in synthetic_records(20, with_timeline=False) if r["status"] == "ok"][:len(scores)]
    for r, s in zip(records, scores):
        r["score"], r["category"] = s, category(s)  # the model's bands (models/vqa.json)
    records[3]["category"] = "fair"  # an 85 its defects capped (an earlier model's record): its word is shown
    _page, m = _measured(tmp_path, "histogram", records)
    rgb = {f"rgb({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)})": name for name, c in CATEGORY_COLORS.items()}
    bar = (420 - 40) / 20  # histogram_svg's plot width over its 20 bars, 25 px in
    drawn: dict[int, set] = {}
    for b in m["bars"]:
        if b["height"] > 0:
            drawn.setdefault(int((b["x"] - 25 + 1) // bar), set()).add(rgb.get(b["fill"], b["fill"]))
    given: dict[int, set] = {}
    for r in records:
        given.setdefault(min(int(r["score"] // 5), 19), set()).add(r["category"])
    assert drawn == given


@pytest.mark.parametrize("fragment", ["#text=%E0%A4%A", "#%", "#status=%ZZ&sort=-score", "#page=%"])
def test_a_malformed_fragment_falls_back_to_the_default_view(tmp_path, fragment):
    records = _records()
    out = tmp_path / "r.html"
    write_report(records, out, thumbnails=0)
    page = open_page(out, fragment=fragment)
    assert page.console_errors == [], page.console
    assert 'id="js-errors"></div>' in page.dom
    assert parse(page.dom).rows == list(range(len(records)))  # every row, in input order
