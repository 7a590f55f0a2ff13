"""Issue 17, what a user reads: an empty upload folder is a job with nothing to do (exit 0, an
empty output, "0 videos"), the summary gives a rate only over work it measured, counts agree
with their nouns, and the progress bar's ok= counts the video it just drew."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import sys
import textwrap

import pytest
from click.testing import CliRunner
from tests.support.fakes import FakeScorer, touch
from tests.support.synthetic_records import synthetic_records
from tests.support.terminal import on_a_terminal

from vqa import cli
from vqa.report import CSV_COLUMNS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    return CliRunner().invoke(cli.cli, [*map(str, args)])


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_an_empty_upload_folder_writes_an_empty_output_and_exits_0(fake, tmp_path, fmt):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    touch(uploads / "notes.txt")
    out = tmp_path / f"r.{fmt}"
    result = run("score", uploads, "--output", out, "--format", fmt)
    assert result.exit_code == 0, result.stderr
    assert "no video files found" in result.stderr and "vqa: 0 videos" in result.stderr
    text = out.read_text()
    if fmt == "jsonl":
        assert text == ""
    elif fmt == "json":
        assert json.loads(text) == []
    else:
        assert list(csv.reader(io.StringIO(text))) == [list(CSV_COLUMNS)]
    again = run("score", uploads, "--output", out, "--format", fmt)  # a scheduled job, next night
    assert again.exit_code == 0 and out.read_text() == text


@pytest.mark.parametrize("store", [False, True])
def test_an_empty_upload_folder_opens_no_model(monkeypatch, tmp_path, store):
    """Nothing to score: the job ends at once, without loading the model or starting workers."""
    opened: list = []
    monkeypatch.setattr(cli.score, "_make_scorer", lambda *a, **k: opened.append(a) or FakeScorer(*a, **k))
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    result = run("score", uploads, *(["--output", tmp_path / "r.jsonl"] if store else []))
    assert result.exit_code == 0, result.stderr
    assert opened == [], "the scorer was made for a job with no videos"
    summary = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"vqa: 0 videos: 0 ok, 0 failed; (0 from the job store, )?0 processed in [\d.]+ s", summary)
    assert ("from the job store" in summary) == store


def test_run_folder_job_on_no_videos_makes_no_scorer(tmp_path):
    from vqa.job import JobSummary, run_folder_job

    def refuse(*_a, **_k):
        raise AssertionError("the scorer was made for a job with no videos")

    out = tmp_path / "r.json"
    assert run_folder_job([tmp_path], output=str(out), fmt="json", make_scorer=refuse) == JobSummary(0, 0, 0)
    assert json.loads(out.read_text()) == []


class Decoding(FakeScorer):
    """Records whose frames were decoded, as a real scoring run's are."""

    def submit(self, p, split=False):
        future = super().submit(p)
        if future.result().status == "ok":
            future.result().frames = {"sampled": 8, "decoded": 8, "decode_errors": 0}
        return future


def test_no_rate_when_nothing_was_decoded(fake, tmp_path):
    bad = touch(tmp_path / "bad.mp4")
    line = run("score", bad).stderr.strip().splitlines()[-1]
    assert line.startswith("vqa: 1 video: 0 ok, 1 failed; 1 processed in") and "/min" not in line
    missing = run("score", tmp_path / "missing.mp4").stderr.strip().splitlines()[-1]
    assert "/min" not in missing


def test_a_rate_counts_only_the_videos_decoded_now(monkeypatch, tmp_path):
    monkeypatch.setattr(cli.score, "_make_scorer", Decoding)
    folder = tmp_path / "in"
    for name in ["a.mp4", "b.mp4", "c_bad.mp4"]:
        touch(folder / name)
    line = run("score", folder).stderr.strip().splitlines()[-1]
    seconds, rate = re.search(r"processed in ([\d.]+) s, ([\d.]+) videos/min", line).groups()
    if float(seconds) > 0:  # 2 decoded over the command's time, the failed check not counted
        assert float(rate) == pytest.approx(2 / float(seconds) * 60, rel=0.2)


def test_counts_agree_with_their_nouns(fake, tmp_path):
    results = tmp_path / "one.jsonl"
    results.write_text(json.dumps(synthetic_records(1, with_timeline=False)[0]) + "\n")
    report = run("report", results, "-o", tmp_path / "one.html", "--thumbnails", 0)
    assert report.exit_code == 0 and "report of 1 video written" in report.stderr, report.stderr
    clip = touch(tmp_path / "a.mp4")
    assert "vqa: 1 video: 1 ok" in run("score", clip).stderr
    page = (tmp_path / "one.html").read_text()
    assert not re.search(r"\b1 videos\b", page) and not re.search(r"\b1 segments\b", page)


SLOW_JOB = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import vqa.cli.score
    from tests.support.fakes import FakeScorer

    class Slow(FakeScorer):
        def submit(self, p, split=False):
            time.sleep(0.3)  # each video long enough for the bar to be drawn
            return super().submit(p)

    vqa.cli.score._make_scorer = Slow
    vqa.cli.main(sys.argv[1:])
""")


def test_the_progress_bars_counts_include_the_video_it_counts(tmp_path):
    folder = tmp_path / "in"
    for k in range(6):
        touch(folder / (f"clip{k}_bad.mp4" if k % 3 == 2 else f"clip{k}.mp4"))
    _, seen = on_a_terminal([sys.executable, "-c", SLOW_JOB.format(root=ROOT), "score", str(folder),
                             "--output", str(tmp_path / "r.jsonl")], cwd=ROOT, env={**os.environ, "COLUMNS": "120"})
    drawn = re.findall(r"(\d+)/6 \[[^\]]*ok=(\d+) failed=(\d+)", seen)
    assert len(drawn) >= 3, seen
    for n, ok, failed in drawn:  # every drawing: the bar's count is ok + failed
        assert int(n) == int(ok) + int(failed), drawn


def test_vqa_bench_says_1_worker():
    from vqa.bench.report import format_report

    study = {"videos": 1, "workers": 1, "score_many_s": 1.0, "threads": 1, "threads_s": 1.0,
             "threads_over_score_many": 1.0, "target": 0.9, "records_identical": True}
    text = format_report({"concurrency": study})
    assert "(1 video, 1 worker)" in text and not re.search(r"\b1 (videos|workers)\b", text), text
