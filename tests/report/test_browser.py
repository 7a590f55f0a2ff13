"""Reports opened in a real browser (headless Chromium): every record has its row, timelines and
the histogram are drawn, no console errors, hostile names are text. Screenshots go to
test-artifacts/. Also: thumbnails through the hardened decoder, and a 10,000-record report."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from tests.support.browser import ARTIFACTS, open_page, parse
from click.testing import CliRunner
from tests.support.malformed_media import CASES as HOSTILE
from tests.support.lying_streams import CASES as HOSTILE2
from tests.support.synthetic_records import HOSTILE_NAME, synthetic_records

from vqa import Scorer, cli
from vqa.report import dumps
from vqa.report_html import write_report
from vqa.report_html._data import display
from vqa.report_html._thumbs import Request, Shot, make_thumbnails

pytestmark = pytest.mark.slow
SAMPLES = Path(__file__).resolve().parents[2] / "sample_videos"
SLOW_HOSTILE = {"gif_huge_canvas"}  # 6 s alone; its record is like the other capped cases


def _shown(path: str) -> str:
    """A path as the page shows it: a non-UTF-8 byte (a lone surrogate) as \\xNN."""
    return display(path)


def _check_page(page, records):
    assert page.console_errors == [], page.console
    dom = parse(page.dom)
    assert 'id="js-errors"></div>' in page.dom
    assert sorted(dom.rows) == list(range(len(records)))  # every record has its row
    assert dom.texts == [_shown(r["path"]) for r in records]
    ok = [r for r in records if r["status"] == "ok"]
    assert dom.count("svg.timeline") >= len(ok)
    assert dom.count("polyline.score") == sum(bool(r.get("timeline")) for r in ok)
    assert dom.count("svg.histogram") == 1 and dom.count("g.bin") == 20
    # The hostile name is text: no element came out of it, and its text is in a cell.
    assert not any(tag == "img" and a.get("src") == "x" for tag, a in dom.attrs_seen)
    return dom


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory):
    """Every hostile fixture (tests/support/malformed_media.py, tests/support/lying_streams.py) and a good clip with a
    hostile name, scored with timelines, as a JSON Lines file."""
    root = tmp_path_factory.mktemp("hostile-report")
    paths = []
    for name, (make, *_rest) in {**HOSTILE, **HOSTILE2}.items():
        if name in SLOW_HOSTILE:
            continue
        folder = root / name
        folder.mkdir()
        paths.append(make(folder))
    named = root / HOSTILE_NAME
    shutil.copy(SAMPLES / "frozen_black_rocket.mp4", named)
    paths.append(str(named))
    with Scorer(workers=2, timeline=True, timeout_s=60) as scorer:
        records = [r.to_dict() for r in scorer.score_many(paths)]
    results = root / "results.jsonl"
    results.write_text("".join(dumps(r) + "\n" for r in records), encoding="utf-8")
    return results, records


def test_hostile_fixtures_report_in_a_browser(hostile_results, tmp_path, validate_record):
    results, records = hostile_results
    for r in records:
        validate_record(r)
    assert sum(bool(r.get("timeline")) for r in records) >= 5
    out = tmp_path / "hostile.html"
    run = CliRunner().invoke(cli.cli, ["report", str(results), "-o", str(out), "--thumbnails", "100"])
    assert run.exit_code == 0, run.output
    page = open_page(out, screenshot=ARTIFACTS / "report-hostile.png")
    dom = _check_page(page, records)
    assert HOSTILE_NAME in dom.texts[[r["path"] for r in records].index(str(Path(results).parent / HOSTILE_NAME))]
    assert dom.count("img") >= 3 and (ARTIFACTS / "report-hostile.png").stat().st_size > 10_000


def test_score_report_one_step_in_a_browser(tmp_path):
    clip = tmp_path / HOSTILE_NAME
    shutil.copy(SAMPLES / "blurred_chelsea.mp4", clip)
    out = tmp_path / "clip.html"
    run = CliRunner().invoke(cli.cli, ["score", str(clip), "--report", str(out), "--workers", "0", "-q",
                                       "-o", str(tmp_path / "r.jsonl")])
    assert run.exit_code == 0, run.output
    record = json.loads((tmp_path / "r.jsonl").read_text())
    page = open_page(out, screenshot=ARTIFACTS / "report-one-clip.png")
    dom = _check_page(page, [record])
    # The worst frame and each defect segment's middle, decoded now.
    assert dom.count("img") == 1 + len(record["defects"]) and dom.count("div.placeholder") == 0


def test_thumbnails_placeholders_for_what_no_longer_decodes(tmp_path):
    clip = tmp_path / "a.mp4"
    shutil.copy(SAMPLES / "clean_coffee.mp4", clip)
    fine = Request(str(clip), "pyav", "", [Shot("worst", 1.0, "w"), Shot("blur", 99.0, "past the end")])
    gone = Request(str(tmp_path / "gone.mp4"), "pyav", "", [Shot("worst", 1.0, "w")])
    changed = Request(str(clip), "pyav", "0" * 32, [Shot("worst", 1.0, "w")])
    (tmp_path / "noise.mp4").write_bytes(os.urandom(4096))
    broken = Request(str(tmp_path / "noise.mp4"), "opencv", "", [Shot("worst", 1.0, "w")])
    ticks = []
    make_thumbnails([fine, gone, changed, broken], progress=ticks.append)
    assert ticks == [1, 1, 1, 1]
    assert fine.shots[0].src.startswith("data:image/jpeg;base64,") and fine.shots[1].problem
    assert gone.shots[0].problem.startswith("E_NOT_FOUND") and gone.shots[0].src is None
    assert "changed" in changed.shots[0].problem
    assert broken.shots[0].problem.startswith("E_NOT_VIDEO")


def test_thumbnail_past_its_time_limit_is_a_placeholder(tmp_path):
    clip = tmp_path / "a.mp4"
    shutil.copy(SAMPLES / "clean_coffee.mp4", clip)
    slow = Request(str(clip), "pyav", "", [Shot("worst", 1.0, "w")])
    after = Request(str(clip), "pyav", "", [Shot("worst", 1.0, "w")])
    make_thumbnails([slow], timeout_s=0.01)  # the helper cannot even start in that time
    make_thumbnails([after])
    assert slow.shots[0].problem.startswith("E_TIMEOUT") and after.shots[0].src


def test_ten_thousand_records_open_in_a_few_seconds(tmp_path):
    records = synthetic_records(10_000)
    start = time.monotonic()
    out = tmp_path / "10k.html"
    write_report(records, out, thumbnails=0)
    build_s = time.monotonic() - start
    page = open_page(out, screenshot=ARTIFACTS / "report-10k.png")
    assert page.console_errors == [], page.console
    dom = parse(page.dom)
    assert len(dom.rows) == 50 and "10000 of 10000 videos; page 1 of 200" in page.dom
    render_ms = int(page.dom.split('data-render-ms="')[1].split('"')[0])
    size_mb = out.stat().st_size / 1e6
    (ARTIFACTS / "report-10k.txt").write_text(
        f"10,000 records: built in {build_s:.1f} s, {size_mb:.1f} MB; browser run (start, load, script, "
        f"DOM dump) {page.seconds:.1f} s; script {render_ms} ms\n")
    assert render_ms < 3000 and page.seconds < 20 and size_mb < 30
    # Every record is in the page's data, and the pager reaches it (each row is drawn when its
    # page is shown; the hostile report checks every row drawn).
    data = page.dom.split('id="vqa-data" type="application/json">')[1].split("</script>")[0]
    assert [r["i"] for r in json.loads(data)["rows"]] == list(range(10_000))


def test_timeline_changes_no_score_category_or_defect():
    clip = str(SAMPLES / "frozen_black_rocket.mp4")
    with Scorer(workers=0) as plain, Scorer(workers=0, timeline=True) as detailed:
        a, b = plain.score(clip).to_dict(), detailed.score(clip).to_dict()
    timeline = b.pop("timeline")
    assert b.pop("config").pop("timeline") is True and a.pop("config") is not None
    assert a == b and "timeline" not in a
    assert len(timeline) == a["frames"]["sampled"] and any(p["frozen"] for p in timeline)
    assert any(p["black"] for p in timeline)


def test_filter_sort_and_page_from_the_address(hostile_results, tmp_path):
    _, records = hostile_results
    out = tmp_path / "r.html"
    write_report(records, out, thumbnails=0)
    ok = [i for i, r in enumerate(records) if r["status"] == "ok"]
    page = open_page(out, fragment="#status=ok&sort=-score")
    assert page.console_errors == []
    expected = sorted(ok, key=lambda i: (-records[i]["score"], i))
    assert parse(page.dom).rows == expected
    blur = open_page(out, fragment="#defect=blur&max=50")
    assert parse(blur.dom).rows == [i for i in ok if records[i]["score"] <= 50
                                    and any(d["type"] == "blur" for d in records[i]["defects"])]
    big = tmp_path / "big.html"
    write_report(synthetic_records(120, with_timeline=False), big, thumbnails=0)
    third = open_page(big, fragment="#page=3")
    assert parse(third.dom).rows == list(range(100, 120)) and "page 3 of 3" in third.dom


def test_two_hour_every_frame_timeline_is_drawn_from_at_most_240_points(tmp_path):
    record = synthetic_records(1, frames=2 * 3600 * 25)[0]
    record["video"]["duration_s"] = 7200.0
    for k, p in enumerate(record["timeline"]):
        p["t_s"] = k / 25
    out = tmp_path / "long.html"
    write_report([record], out, thumbnails=0)
    assert out.stat().st_size < 100_000  # 180,000 frames of timeline in the record
    page = open_page(out, screenshot=ARTIFACTS / "report-2h-every-frame.png")
    assert page.console_errors == []
    line = page.dom.split('class="score" points="')[1].split('"')[0]
    assert 100 < len(line.split()) <= 240 and 'class="score-range"' in page.dom


def test_thumbnail_progress_bar_on_a_terminal(tmp_path, monkeypatch):
    import io
    import sys

    from vqa.cli.report import write_html

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    records = synthetic_records(3, with_timeline=False)
    for r in records:
        r["path"] = str(SAMPLES / "clean_coffee.mp4")
        r["video"] = None if r["video"] is None else {**r["video"], "fingerprint": ""}
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    write_html(records, str(tmp_path / "r.html"), thumbnails=2, quiet=False, source="")
    assert "thumbnails" in err.getvalue() and "2/2" in err.getvalue()
