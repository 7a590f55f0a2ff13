"""The data an HTML report is built from, and the page's escaping: no browser needed here.
(tests/report/test_browser.py opens real pages in headless Chromium.)"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from tests.support.synthetic_records import synthetic_records

from vqa import cli
from vqa.aggregate import FrameResult, timeline
from vqa.model import load_model_spec
from vqa.errors import UsageError
from vqa.jobstore import config_key
from vqa.preprocess import FrameStats
from vqa.report_html import MAX_POINTS, build_report, downsample, embed_json, load_records, row, summary, worst_rows
from vqa.report_html._assets import SCRIPT
from vqa.report_html._data import histogram
from vqa.report_html._thumbs import plan_shots
from vqa.types import MODEL_DEFECTS, Run, SamplePlan, VideoScore


def _frame(t: float, score: float, *, luma: float = 100.0, thumb: int = 0, logit: float = -5.0) -> FrameResult:
    stats = FrameStats(luma, luma, np.full((72, 128), thumb, np.uint8))
    return FrameResult(0, t, np.array([score] + [logit] * len(MODEL_DEFECTS), np.float32), stats)


DECISION = load_model_spec().decision


# --- the record's timeline (vqa.aggregate.timeline) -------------------------------------------

def test_timeline_has_one_point_per_frame_with_probabilities_and_flags():
    frames = [_frame(0.04 * k, 50.0 + k, thumb=7 if 2 <= k <= 5 else k * 20) for k in range(8)]
    frames[7] = _frame(0.28, 10.0, luma=DECISION.black_luma_mean / 2)
    plan = SamplePlan("all", (Run(0.0, 0, 0.0, 0.32),), None)
    points = timeline(frames, plan, DECISION)
    assert [p["t_s"] for p in points] == [round(0.04 * k, 3) for k in range(8)]
    assert points[0]["score"] == 50.0 and set(MODEL_DEFECTS) <= set(points[0])
    assert points[0]["blur"] == pytest.approx(1 / (1 + np.exp(5)), abs=1e-3)
    assert [p["frozen"] for p in points] == [False, False, True, True, True, True, False, False]
    assert [p["black"] for p in points] == [False] * 7 + [True]


def test_timeline_is_off_by_default_in_the_record(validate_record):
    record = VideoScore(path="a.mp4", status="ok", score=50.0, category="fair", model={}, config={})
    assert "timeline" not in record.to_dict()
    record.timeline = [{"t_s": 0.0, "score": 50.0, **{k: 0.1 for k in MODEL_DEFECTS}, "black": False, "frozen": False}]
    assert record.to_dict()["timeline"] == record.timeline


def test_timeline_in_the_contract_schema(validate_record):
    record = synthetic_records(1)[0]
    validate_record(record)
    record["timeline"][0]["blur"] = 1.5
    with pytest.raises(AssertionError, match="timeline"):
        validate_record(record)


def test_timeline_option_keys_the_job_store_only_when_on():
    config = {"sampling": "default", "backend": "openvino", "decoder": "pyav", "precision": "fp32"}
    assert config_key({}, config) == config_key({}, {**config, "batch_size": 8})
    assert config_key({}, config) != config_key({}, {**config, "timeline": True})


# --- downsampling ------------------------------------------------------------------------------

def test_two_hours_of_every_frame_become_at_most_max_points():
    n = 2 * 3600 * 25
    points = [{"t_s": k / 25, "score": 50.0 + (k % 100) / 10, "blur": 0.9 if k == 1000 else 0.0,
               "noise": 0.0, "black": k >= n - 250, "frozen": False} for k in range(n)]
    points[5000]["score"] = 3.0
    points[-1]["score"] = 0.0  # black frames are never the "worst frame"
    tl = downsample(points)
    assert len(tl["t"]) <= MAX_POINTS and sum(tl["n"]) == n
    assert min(tl["lo"]) == 0.0 and tl["worst"] == {"t_s": 200.0, "score": 3.0}
    assert set(tl["p"]) == {"blur"} and max(tl["p"]["blur"]) == 0.9
    assert tl["black"][-1] == 1 and "frozen" not in tl
    assert len(json.dumps(tl)) < 20_000


def test_short_timeline_keeps_every_point():
    points = [{"t_s": k, "score": 10.0 * k} for k in range(5)]
    tl = downsample(points)
    assert tl["t"] == [0, 1, 2, 3, 4] and tl["s"] == [0, 10, 20, 30, 40] and "lo" not in tl and tl["p"] == {}


@pytest.mark.parametrize("bad", [None, "x", [], [{"t_s": "a"}], [{"t_s": float("nan"), "score": 1}], [1, None]])
def test_unusable_timeline_is_none(bad):
    assert downsample(bad) is None


# --- rows, summary, histogram --------------------------------------------------------------------

def test_row_tolerates_fields_of_the_wrong_type():
    r = row(0, {"path": "a.mp4", "status": "ok", "score": "99", "category": "nope", "defects": [{"type": "x"}, 3],
                "video": [], "warnings": "W", "timeline": "x"})
    assert r["score"] is None and r["category"] is None and r["defects"] == [] and r["warnings"] == []
    assert r["timeline"] is None and r["width"] is None


def test_summary_counts():
    records = synthetic_records(200)
    rows = [row(i, r) for i, r in enumerate(records)]
    s = summary(records, rows)
    assert s["videos"] == 200 and s["status"]["error"] == 20 and s["status"]["ok"] == 180
    assert sum(s["categories"].values()) == 180 and sum(s["histogram"]) == 180
    # Each bar's split by category is the records' own: it adds up to the bar and to the counts.
    assert [sum(b.values()) for b in s["histogram_categories"]] == s["histogram"]
    assert {c: sum(b.get(c, 0) for b in s["histogram_categories"]) for c in s["categories"]} == s["categories"]
    assert sum(s["errors"].values()) == 20 and set(s["errors"]) <= {"E_NOT_VIDEO", "E_DECODE", "E_TIMEOUT", "E_EMPTY"}
    assert s["defect_segments"]["blur"] == sum(d["type"] == "blur" for r in records for d in r["defects"])
    assert s["with_timeline"] == 180 and len(s["setups"]) == 1 and s["setups"][0][1] == 200


def test_histogram_edges():
    assert histogram([0, 4.99, 5, 99.9, 100]) == [2, 1] + [0] * 17 + [2]


def test_worst_rows_are_the_lowest_scores():
    rows = [row(i, r) for i, r in enumerate(synthetic_records(100))]
    worst = worst_rows(rows, 5)
    scores = sorted(r["score"] for r in rows if r["score"] is not None)
    assert [rows[i]["score"] for i in worst] == scores[:5] and worst_rows(rows, 0) == []


def test_shots_are_the_worst_frame_and_each_segment_middle():
    r = row(0, synthetic_records(1)[0] | {"defects": [{"type": "blur", "severity": 0.5, "start_s": 1.0, "end_s": 3.0}]})
    shots = plan_shots(r)
    assert [s.kind for s in shots] == ["worst", "blur"] and shots[1].t_s == 2.0
    assert shots[0].t_s == r["timeline"]["worst"]["t_s"]


# --- reading records -----------------------------------------------------------------------------

def test_load_jsonl_and_json(tmp_path):
    records = synthetic_records(3) + [{"path": "caf\udcc3.mp4", "status": "error"}]
    from vqa.report import dumps
    (tmp_path / "a.jsonl").write_text("".join(dumps(r) + "\n" for r in records), encoding="utf-8")
    (tmp_path / "a.json").write_text(json.dumps(records), encoding="utf-8")
    assert load_records(tmp_path / "a.jsonl") == records == load_records(tmp_path / "a.json")


@pytest.mark.parametrize("text, match", [('{"path": "a"}\n{oops\n', "line 2"), ('[1]', "record 1"),
                                         ('{"no": "path"}\n', "record 1")])
def test_load_refuses_what_is_not_records(tmp_path, text, match):
    (tmp_path / "r.jsonl").write_text(text)
    with pytest.raises(UsageError, match=match):
        load_records(tmp_path / "r.jsonl")


# --- the page ------------------------------------------------------------------------------------

def test_embedded_json_cannot_end_its_script_element():
    text = embed_json({"p": "</script><!-- & \u2028 caf\udcc3"})
    assert not set(text) & set("<>&") and text.isascii()
    assert json.loads(text) == {"p": "</script><!-- & \u2028 caf\udcc3"}


def test_page_shows_hostile_text_only_escaped_and_fetches_nothing():
    records = synthetic_records(60)
    records[0]["model"]["name"] = "<script>alert(3)</script>"
    page = build_report(records, thumbnails=0, source="from <b>x</b>")
    assert "<img" not in page and "alert(1)" in page  # the name is there, as escaped data
    assert "<script>alert" not in page and "<b>" not in page
    assert page.count("<script") == 2  # the data block and the page's own script, nothing else
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp


def test_report_without_timelines_still_draws_the_rest():
    page = build_report(synthetic_records(20, with_timeline=False), thumbnails=0)
    assert 'class="histogram"' in page and '"timeline":null' in page


# --- the command ---------------------------------------------------------------------------------

def _write(tmp_path, records):
    from vqa.report import dumps
    path = tmp_path / "results.jsonl"
    path.write_text("".join(dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_report_command(tmp_path):
    results = _write(tmp_path, synthetic_records(30))
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli.cli, ["report", str(results), "-o", str(out), "--thumbnails", "0"])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>") and "report of 30 videos" in result.output


def test_report_command_usage_errors(tmp_path):
    results = _write(tmp_path, synthetic_records(3))
    runner = CliRunner()
    same = runner.invoke(cli.cli, ["report", str(results), "-o", str(results)])
    assert same.exit_code == 2 and "destroy" in same.output and results.read_text().startswith("{")
    (tmp_path / "bad.jsonl").write_text("not json\n")
    bad = runner.invoke(cli.cli, ["report", str(tmp_path / "bad.jsonl"), "-o", str(tmp_path / "x.html")])
    assert bad.exit_code == 2 and "line 1" in bad.output and not (tmp_path / "x.html").exists()


def test_score_with_report_asks_for_timelines_and_writes_the_page(fake, tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"x")
    (tmp_path / "bad.mp4").write_bytes(b"x")
    out = tmp_path / "one.html"
    result = CliRunner().invoke(cli.cli, ["score", str(tmp_path), "-o", str(tmp_path / "r.jsonl"), "--report",
                                          str(out), "--thumbnails", "0"])
    assert result.exit_code == 1, result.output
    assert fake.instances[0].options.timeline is True
    assert out.exists() and "E_NOT_VIDEO" in out.read_text()


def test_score_report_may_not_overwrite_an_input_or_the_output(fake, tmp_path):
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"x")
    for target in (clip, tmp_path / "r.jsonl"):
        (tmp_path / "r.jsonl").write_text("")
        result = CliRunner().invoke(cli.cli, ["score", str(clip), "-o", str(tmp_path / "r.jsonl"),
                                              "--report", str(target)])
        assert result.exit_code == 2 and "--report" in result.output
    assert clip.read_bytes() == b"x"


def test_long_text_is_cut_saying_how_much():
    # 200,000 characters with no break in one error message took Chromium 49 s to lay out.
    from vqa.report_html._data import SHOWN_CHARS, SHOWN_WARNINGS, row

    record = {"path": "p" * 10_000, "status": "error", "error": {"code": "E_DECODE", "message": "A" * 200_000},
              "warnings": ["W" * 300_000] * 1000}
    r = row(0, record)
    assert r["error_message"].startswith("A" * SHOWN_CHARS) and r["error_message"].endswith("(198,000 more characters)")
    assert len(r["path"]) < SHOWN_CHARS + 40 and len(r["warnings"]) == SHOWN_WARNINGS
    assert row(0, {"path": "short.mp4", "status": "ok"})["path"] == "short.mp4"


def test_the_reader_finds_every_field_it_shows_in_a_record_of_the_types():
    # A record made from vqa.types with every field filled: a key the reader spells otherwise
    # (a renamed field) would come back empty here.
    from vqa.types import Defect, VideoInfo, VideoScore

    video = VideoInfo(width=640, height=360, fps=25.0, duration_s=2.0, frame_count=50, codec="h264")
    ok = VideoScore(path="a.mp4", status="ok", score=63.2, category="good", defects=[Defect("blur", 0.7, 0.0, 1.0)],
                    video=video, warnings=["W_ROTATED: 90"], model={"name": "m", "version": "1", "sha256": "0" * 64},
                    timeline=[{"t_s": 0.5, "score": 60.0, "blur": 0.9, "black": False, "frozen": False}]).to_dict()
    failed = VideoScore(path="b.mp4", status="error", error={"code": "E_DECODE", "message": "no frame"}).to_dict()
    shown = row(0, ok)
    assert all(shown[k] not in (None, "", []) for k in shown if not k.startswith("error_")), shown
    assert row(1, failed)["error_code"] == "E_DECODE" and row(1, failed)["error_message"] == "no frame"
    assert summary([ok], [shown])["setups"] == [({"model": ok["model"], "config": {}}, 1)]
