"""Issue 9 (operator mistakes, resume) and issue 10 (fixes 7, 10, 11, 13) through the `vqa score`
command. The scorer is faked (tests/support/fakes.py) wherever the mechanism is the CLI's, the job's or
the store's, so these run in seconds; a subprocess is used where a signal or a resource limit
must reach a real process."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from concurrent.futures import Future
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner
from tests.support.docs_pages import page
from tests.support.fakes import FakeScorer, touch

from vqa import cli
from vqa.jobstore import Identity, JobStore, config_key, default_db_path
from vqa.report import CSV_COLUMNS, open_writer
from vqa.types import Defect, VideoInfo, VideoScore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    return CliRunner().invoke(cli.cli, ["score", *map(str, args)])


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "in"
    for name in ["a.mp4", "b.mp4", "c.mkv"]:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(name.encode() * 100)
    return d


def scored() -> list[str]:
    return [os.path.basename(p) for s in FakeScorer.instances for p in s.seen]


# --- item 7 (and issue 10, fix 10): what a stored record is keyed on -------------------------

def test_same_size_new_content_with_its_mtime_restored_is_scored_again(fake, folder, tmp_path):
    out = tmp_path / "r.jsonl"
    assert run(folder, "--output", out).exit_code == 0
    clip = folder / "b.mp4"
    st = clip.stat()
    clip.write_bytes(b"X" * st.st_size)  # what an archive tool does: same size, then the old mtime
    os.utime(clip, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert clip.stat().st_mtime_ns == st.st_mtime_ns and clip.stat().st_size == st.st_size
    FakeScorer.instances = []
    assert run(folder, "--output", out).exit_code == 0
    assert scored() == ["b.mp4"]


def test_options_that_only_change_speed_do_not_score_again(fake, folder, tmp_path):
    out = tmp_path / "r.jsonl"
    assert run(folder, "--output", out, "--batch-size", "4").exit_code == 0
    FakeScorer.instances = []
    again = run(folder, "--output", out, "--batch-size", "16", "--mode", "latency", "--workers", "1")
    assert again.exit_code == 0 and scored() == []
    FakeScorer.instances = []
    assert run(folder, "--output", out, "--frames", "8").exit_code == 0
    assert scored() == ["a.mp4", "b.mp4", "c.mkv"]  # the sampling changes results


def test_config_key_keeps_only_result_options():
    base = {"sampling": "default", "backend": "openvino", "decoder": "pyav", "precision": "fp32"}
    key = config_key({"sha256": "1"}, {**base, "batch_size": 4, "mode": "throughput"})
    assert key == config_key({"sha256": "1"}, {**base, "batch_size": 16, "mode": "latency"})
    assert key != config_key({"sha256": "1"}, {**base, "decoder": "opencv"})


class ReplacingScorer(FakeScorer):
    """The file is replaced after the job looked it up and before the decoder opened it: the
    record carries the identity of what the decoder opened (as the real readers do)."""

    def submit(self, p, split=False):
        # run_job calls submit after its job-store lookup: the file changes in between.
        self.seen.append(p)
        with open(p, "wb") as f:
            f.write(b"replaced content")
        with open(p, "rb") as f:
            fd = f.fileno()
            st = os.fstat(fd)
            from vqa.files import fingerprint
            video = VideoInfo(width=64, height=48, fps=25.0, duration_s=1.0, frame_count=25, codec="h264",
                              size_bytes=st.st_size, mtime_ns=st.st_mtime_ns,
                              fingerprint=fingerprint(fd, st.st_size))
        future = Future()
        future.set_result(VideoScore(path=p, status="ok", score=50.0, category="fair", video=video))
        return future


def test_a_file_replaced_during_the_job_is_stored_as_what_was_opened(monkeypatch, tmp_path):
    clip = tmp_path / "in" / "a.mp4"
    touch(clip).write_bytes(b"original content, longer")
    monkeypatch.setattr(cli.score, "_make_scorer", ReplacingScorer)
    out = tmp_path / "r.jsonl"
    assert run(clip, "--output", out).exit_code == 0
    with JobStore(default_db_path(str(out))) as store:
        scorer = ReplacingScorer.instances[-1]
        key = config_key(scorer.model, scorer.config)
        now = Identity.of(str(clip))
        assert store.count() == 1 and store.status(now, key) == "ok"  # found under what it is now


# --- item 8: output paths that collide --------------------------------------------------------

def test_output_and_db_the_same_file_is_refused_before_anything_is_written(fake, folder, tmp_path):
    x = tmp_path / "x"
    x.write_text("precious\n")
    result = run(folder, "--output", x, "--db", x)
    assert result.exit_code == 2 and "same file" in result.stderr
    assert x.read_text() == "precious\n"
    assert sorted(os.listdir(tmp_path)) == ["in", "x"]


def test_output_equal_to_an_input_video_is_refused(fake, folder):
    video = folder / "a.mp4"
    before = digest(video)
    result = run(folder, "--output", video)
    assert result.exit_code == 2 and "also an input" in result.stderr
    assert digest(video) == before
    result = run(video, "--output", folder / ".." / "in" / "a.mp4")  # another spelling, same file
    assert result.exit_code == 2 and digest(video) == before
    result = run(folder, "--output", folder.parent / "r.jsonl", "--db", folder / "c.mkv")
    assert result.exit_code == 2 and "also an input" in result.stderr


def test_output_through_a_symlink_replaces_the_link_not_its_target(fake, folder, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("not yours\n")
    link = tmp_path / "out.jsonl"
    os.symlink(target, link)
    assert run(folder, "--output", link).exit_code == 0
    assert target.read_text() == "not yours\n"
    assert not os.path.islink(link) and len(lines(link)) == 3


def test_output_replaced_whole_and_no_partial_file_left(fake, folder, tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    assert run(folder, "--output", out, "--format", "json").exit_code == 0
    assert len(json.loads(out.read_text())) == 3
    assert sorted(os.listdir(tmp_path)) == ["in", "r.json", "r.json.vqa.db"]


# --- item 9 (and issue 10, fix 11): a foreign database, the lock file -------------------------

def test_a_foreign_sqlite_file_is_refused_and_not_modified(fake, folder, tmp_path):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ann')")
    conn.close()
    before, mtime = digest(db), db.stat().st_mtime_ns
    result = run(folder, "--db", db)
    assert result.exit_code == 2 and "not a vqa job store" in result.stderr
    assert digest(db) == before and db.stat().st_mtime_ns == mtime
    assert open(db, "rb").read(20)[18:20] == b"\x01\x01"  # still a rollback journal, not WAL
    assert sorted(os.listdir(tmp_path)) == ["app.db", "in"]  # no .lock, -wal or -shm


def test_a_store_of_the_old_layout_is_refused_untouched(fake, folder, tmp_path):
    db = tmp_path / "old.vqa.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE results (path BLOB)")
        conn.execute("PRAGMA user_version=1")
    conn.close()
    before = digest(db)
    result = run(folder, "--db", db)
    assert result.exit_code == 2 and "schema 1" in result.stderr and digest(db) == before


def test_no_lock_file_is_left_and_a_second_job_is_still_refused(fake, folder, tmp_path):
    out = tmp_path / "r.jsonl"
    assert run(folder, "--output", out).exit_code == 0
    assert sorted(os.listdir(tmp_path)) == ["in", "r.jsonl", "r.jsonl.vqa.db"]
    with JobStore(default_db_path(str(out))):
        second = run(folder, "--output", out)
    assert second.exit_code == 2 and "another vqa job" in second.stderr


# --- item 10: a full disk under the job store -------------------------------------------------

FULL_STORE = textwrap.dedent("""
    import resource, signal, sys
    sys.path.insert(0, {root!r})
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))
    import vqa.cli
    from tests.support.fakes import FakeScorer
    vqa.cli.score._make_scorer = FakeScorer
    vqa.cli.main(sys.argv[1:])
""")


def test_a_full_disk_under_the_job_store_is_e_output_exit_3(tmp_path):
    folder = tmp_path / "in"
    for k in range(200):
        touch(folder / f"clip{k:03d}.mp4").write_bytes(b"x" * 10)
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-c", FULL_STORE.format(root=ROOT),
                           "score", str(folder), "--output", str(out), "--db", str(tmp_path / "j.db")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "E_OUTPUT" in proc.stderr and "job store" in proc.stderr and "E_INTERNAL" not in proc.stderr
    assert "Traceback" not in proc.stderr
    records = lines(out)  # what was stored and written so far is valid
    assert 0 < len(records) < 200


# --- item 11: Ctrl-C ----------------------------------------------------------------------------

SLOW = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import vqa.cli
    from tests.support.fakes import held_scorer

    vqa.cli.score._make_scorer = held_scorer(free=2)  # two records, then the job waits for the signal
    vqa.cli.main(sys.argv[1:])
""")


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_job_has_its_own_exit_status(tmp_path, sig, status):
    folder = tmp_path / "in"
    for k in range(40):
        touch(folder / f"clip{k:02d}.mp4")
    out = tmp_path / "r.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", SLOW.format(root=ROOT),
                             "score", str(folder), "--output", str(out)],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    partial = tmp_path / "r.jsonl.vqa-partial"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (partial.exists() and partial.read_text().count("\n") >= 2):
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == status, err
    assert "Aborted" not in err and "interrupted" in err and "run the same command to resume" in err
    records = lines(out)  # put in place, valid, and resumable
    assert 2 <= len(records) < 40 and not partial.exists()


def test_exit_statuses_documented():
    help_text = CliRunner().invoke(cli.cli, ["score", "--help"]).output
    assert "130" in help_text and "143" in help_text
    statuses = page("errors.md")
    assert "| 130 |" in statuses and "| 143 |" in statuses


# --- item 12: line separators in names -----------------------------------------------------------

def test_line_separators_in_names_stay_on_one_jsonl_line(fake, tmp_path):
    folder = tmp_path / "in"
    names = ["a\u2028b.mp4", "c\u2029d.mp4", "e\x85f.mp4", "g\x0bh\x0ci\x1cj.mp4"]
    for name in names:
        touch(folder / name)
    out = tmp_path / "r.jsonl"
    assert run(folder, "--output", out).exit_code == 0
    text = out.read_text(encoding="utf-8")
    assert len(text.splitlines()) == len(names)  # str.splitlines splits on all of them
    assert sorted(os.path.basename(json.loads(line)["path"]) for line in text.splitlines()) == sorted(names)
    for raw in ("\u2028", "\u2029", "\x85"):
        assert raw not in text


# --- issue 10, fix 7: CSV carries the whole contract ---------------------------------------------

def _leaves(d: dict, prefix: str = "") -> set[str]:
    keys = set()
    for k, v in d.items():
        if isinstance(v, dict) and k in ("video", "frames", "model", "config", "sampling"):
            keys |= {f"{k}.{kk}" for kk in v}
        else:
            keys.add(k)
    return keys


def full_record(path="clip.mp4") -> VideoScore:
    return VideoScore(
        path=path, status="ok", score=63.2, category="good", defects=[Defect("blur", 0.7, 0.0, 3.2)],
        video=VideoInfo(width=640, height=360, fps=25.0, duration_s=2.0, frame_count=50, codec="h264",
                        rotation=90, pixel_format="yuv420p", size_bytes=1234, fingerprint="ab" * 16),
        frames={"sampled": 32, "decoded": 50, "decode_errors": 1},
        model={"name": "vqa-effl0", "version": "1.0.0", "sha256": "cd" * 32},
        config={"sampling": "default", "backend": "openvino", "batch_size": 4, "decoder": "pyav",
                "precision": "fp32", "mode": "throughput"},
        sampling={"mode": "default", "requested": 32, "runs": 8, "run_length": 4},
        warnings=["W_CORRUPT_FRAMES: 1 packets or frames failed to decode"])


def test_csv_has_a_column_for_every_field_of_the_contract():
    d = full_record().to_dict()
    buf = io.StringIO()
    with open_writer("csv", buf) as w:
        w.write(d)
    (row,) = csv.DictReader(io.StringIO(buf.getvalue(), newline=""))
    for leaf in _leaves(d):
        obj, _, key = leaf.partition(".")
        column = key if obj == "video" else (f"{obj}_{key}" if key else obj)
        if obj == "error":  # null here; its code and message have a column each
            assert {"error_code", "error_message"} <= set(CSV_COLUMNS)
            continue
        assert column in CSV_COLUMNS, leaf
        value = d[obj][key] if key else d[obj]
        if obj == "defects":
            assert row[column] == "blur:0.7:0-3.2"
        elif obj not in ("warnings", "error"):
            assert row[column] == str(value), leaf
    contract = page("output-contract.md")
    assert "type:severity:start_s-end_s" in contract and "`frames_decoded`" in contract


# --- issue 10, fix 11: the summary line -----------------------------------------------------

def test_summary_words_and_counts(fake, tmp_path):
    one = touch(tmp_path / "bad.mp4")
    result = run(one)
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("vqa: 1 video: 0 ok, 1 failed; 1 processed in") and "job store" not in line
    folder = tmp_path / "in"
    for name in ["a.mp4", "b_bad.mp4", "c.mp4"]:
        touch(folder / name)
    out = tmp_path / "r.jsonl"
    run(folder, "--output", out)
    touch(folder / "d.mp4")
    again = run(folder, "--output", out).stderr.strip().splitlines()[-1]
    # ok + failed = all; from the store + processed now = all: no count overlaps another
    assert again.startswith("vqa: 4 videos: 3 ok, 1 failed; 3 from the job store, 1 processed in")


# --- issue 10, fix 13: URLs -----------------------------------------------------------------

def test_a_url_is_told_that_urls_are_not_inputs(fake, tmp_path):
    result = run("https://example.com/clip.mp4", "--format", "jsonl")
    assert result.exit_code == 1
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert record["error"]["code"] == "E_BAD_PATH" and "URLs are not inputs" in record["error"]["message"]
    assert FakeScorer.instances[0].seen == []


@pytest.mark.parametrize("tables", [["CREATE TABLE notes(t)"], ["CREATE TABLE results(id, body)"]])
def test_another_programs_database_with_our_schema_number_is_refused_untouched(fake, folder, tmp_path, tables):
    # user_version 2 was all that was checked: the file was switched to WAL and given a results
    # table, or (its own "results") the run ended in E_INTERNAL after replacing the output.
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    for sql in tables:
        con.execute(sql)
    con.execute("PRAGMA user_version=2")
    con.commit()
    con.close()
    before = db.read_bytes()
    out = tmp_path / "out.jsonl"
    out.write_text("kept\n")
    result = CliRunner().invoke(cli.cli, ["score", str(folder), "--output", str(out), "--db", str(db)])
    assert result.exit_code == 2 and "is not a vqa job store" in result.output, result.output
    assert db.read_bytes() == before and out.read_text() == "kept\n"
    assert fake.instances == []
