"""Batch jobs: the job store, resuming, --fail-fast, the summary and filenames as data.

The scorer is faked (see test_cli.FakeScorer), so these run in milliseconds; the kill -9
test with the real engine is in test_resume.py.
"""
from __future__ import annotations

import csv
import json
import os
import sqlite3
import time

import pytest
from click.testing import CliRunner
from tests.support.fakes import FakeScorer, touch

from vqa import cli
from vqa.inputs import Input
from vqa.job import SCORED, STORED, run_job
from vqa.jobstore import Identity, JobStore, config_key, default_db_path


def run(*args):
    return CliRunner().invoke(cli.cli, ["score", *map(str, args)])


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "in"
    for name in ["a.mp4", "b_bad.mp4", "c.mkv", "d.webm"]:
        touch(d / name)
    return d


def scored_paths() -> list[str]:
    return [os.path.basename(p) for s in FakeScorer.instances for p in s.seen]


def test_rerun_skips_finished_videos_and_rewrites_the_output(fake, folder, tmp_path):
    out = tmp_path / "results.jsonl"
    first = run(folder, "--output", out)
    assert first.exit_code == 1, first.output  # b_bad fails
    assert scored_paths() == ["a.mp4", "b_bad.mp4", "c.mkv", "d.webm"]
    assert os.path.exists(default_db_path(str(out)))
    before = out.read_text()

    FakeScorer.instances = []
    again = run(folder, "--output", out)
    assert again.exit_code == 1
    assert scored_paths() == []  # nothing scored twice
    assert out.read_text() == before
    assert "4 from the job store, 0 processed" in again.stderr


def test_changed_file_or_options_are_scored_again(fake, folder, tmp_path):
    out = tmp_path / "results.jsonl"
    run(folder, "--output", out)
    later = time.time() + 10
    os.utime(folder / "c.mkv", (later, later))  # a new upload under the same name
    FakeScorer.instances = []
    run(folder, "--output", out)
    assert scored_paths() == ["c.mkv"]

    FakeScorer.instances = []
    run(folder, "--output", out, "--frames", "8")  # other options: other results
    assert len(scored_paths()) == 4


def test_retry_failed_scores_only_the_failures(fake, folder, tmp_path):
    out = tmp_path / "results.jsonl"
    run(folder, "--output", out)
    FakeScorer.instances = []
    result = run(folder, "--output", out, "--retry-failed")
    assert scored_paths() == ["b_bad.mp4"]
    assert [r["status"] for r in lines(out)] == ["ok", "error", "ok", "ok"]
    assert result.exit_code == 1


def test_db_option_and_stdout(fake, folder, tmp_path):
    db = tmp_path / "job.db"
    first = run(folder, "--db", db)
    assert len(first.stdout.splitlines()) == 4
    FakeScorer.instances = []
    second = run(folder, "--db", db)
    assert scored_paths() == [] and second.stdout == first.stdout


def test_without_output_or_db_nothing_is_stored(fake, folder):
    run(folder)
    FakeScorer.instances = []
    run(folder)
    assert len(scored_paths()) == 4


def test_fail_fast_stops_after_the_first_failure(fake, folder, tmp_path):
    out = tmp_path / "results.jsonl"
    result = run(folder, "--output", out, "--fail-fast")
    assert result.exit_code == 1
    assert [os.path.basename(r["path"]) for r in lines(out)] == ["a.mp4", "b_bad.mp4"]
    assert "2 of 4 videos" in result.stderr


def test_summary_on_stderr_and_quiet(fake, folder):
    result = run(folder)
    assert "4 videos: 3 ok, 1 failed; 4 processed in" in result.stderr
    assert "videos/min" not in result.stderr  # the fake decodes no frame: no rate (issue 17)
    assert run(folder, "--quiet").stderr == ""


def test_a_second_job_on_the_same_store_is_refused(fake, folder, tmp_path):
    db = tmp_path / "job.db"
    with JobStore(str(db)):
        result = run(folder, "--db", db)
    assert result.exit_code == 2 and "another vqa job" in result.stderr


def test_not_a_database_is_a_usage_error(fake, folder, tmp_path):
    db = tmp_path / "job.db"
    db.write_bytes(b"this is not sqlite" * 100)
    result = run(folder, "--db", db)
    assert result.exit_code == 2 and "job store" in result.stderr


def test_another_sqlite_database_is_refused_untouched(fake, folder, tmp_path):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    result = run(folder, "--db", db)
    assert result.exit_code == 2 and "not a vqa job store" in result.stderr
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_a_full_disk_is_one_clean_error_and_the_store_keeps_the_results(fake, folder, tmp_path, fmt):
    db = tmp_path / "job.db"
    result = run(folder, "--output", "/dev/full", "--db", db, "--format", fmt)
    assert result.exit_code == 3
    assert "E_OUTPUT" in result.stderr and "re-run to resume" in result.stderr
    assert "Traceback" not in result.stderr
    with JobStore(str(db)) as store:  # the first record is stored before its write fails
        assert store.count() == (0 if fmt == "csv" else 1)  # CSV fails on its header


class WatchingScorer(FakeScorer):
    """Checks, before each record after the first, that the earlier ones are already on disk."""

    out = None

    def submit(self, path):
        k = len(self.seen)
        if k:  # a finished record is written before the next input is even started
            assert len(self.out.read_text().splitlines()) == k, "results held back"
        return super().submit(path)


def test_results_are_written_as_they_arrive(monkeypatch, folder, tmp_path):
    # Written to results.jsonl.vqa-partial as they arrive, renamed into place at the end.
    WatchingScorer.out = tmp_path / "results.jsonl.vqa-partial"
    monkeypatch.setattr(cli.score, "_make_scorer", WatchingScorer)
    result = run(folder, "--output", tmp_path / "results.jsonl")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert len(lines(tmp_path / "results.jsonl")) == 4 and not WatchingScorer.out.exists()


def test_run_job_commits_before_yielding(tmp_path):
    clip = touch(tmp_path / "a.mp4")
    with JobStore(str(tmp_path / "j.db")) as store:
        outcomes = run_job(FakeScorer(), [Input(str(clip))], model={}, config={}, store=store)
        first = next(outcomes)
        assert first.source == SCORED and store.count() == 1
        assert list(outcomes) == []
        again = list(run_job(FakeScorer(), [Input(str(clip))], model={}, config={}, store=store))
        assert [o.source for o in again] == [STORED]
        assert again[0].record == first.record


def test_a_closed_store_says_it_is_closed(tmp_path):
    store = JobStore(str(tmp_path / "j.db"))
    store.close()
    with pytest.raises(ValueError, match="is closed"):  # not AttributeError on None
        store.count()


# --- filenames are data -----------------------------------------------------------------

ODD_NAMES = [b"caf\xe9 latin-1.mp4", b"new\nline.mp4", b"tab\tand, comma \"quoted\".mp4",
             "emoji \U0001f3ac.mp4".encode()]


@pytest.fixture
def odd_folder(tmp_path):
    d = tmp_path / "odd"
    d.mkdir()
    for name in ODD_NAMES:
        with open(os.path.join(os.fsencode(d), name), "wb"):
            pass
    return d


def test_odd_names_survive_jsonl_csv_and_sqlite(fake, odd_folder, tmp_path):
    want = sorted(os.path.join(os.fsencode(odd_folder), n) for n in ODD_NAMES)
    out = tmp_path / "r.jsonl"
    assert run(odd_folder, "--output", out).exit_code == 0
    records = lines(out)  # one parseable line per record, newline names included
    assert [os.fsencode(r["path"]) for r in records] == want

    csv_out = tmp_path / "r.csv"
    assert run(odd_folder, "--output", csv_out, "--format", "csv").exit_code == 0
    with open(csv_out, encoding="utf-8", errors="surrogateescape", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [os.fsencode(r["path"]) for r in rows] == want

    with sqlite3.connect(default_db_path(str(out))) as db:
        stored = sorted(row[0] for row in db.execute("SELECT path FROM results"))
    assert stored == want


def test_config_key_depends_on_model_and_options():
    a = config_key({"sha256": "1"}, {"sampling": "default"})
    assert a == config_key({"sha256": "1"}, {"sampling": "default"})
    assert a != config_key({"sha256": "2"}, {"sampling": "default"})
    assert a != config_key({"sha256": "1"}, {"sampling": "all"})


def test_identity_of_a_missing_file_is_none(tmp_path):
    assert Identity.of(str(tmp_path / "nope.mp4")) is None
