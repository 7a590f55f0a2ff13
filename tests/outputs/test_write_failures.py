"""Fifth round (outputs): what the product writes under pressure. Nothing lost, nothing
duplicated, a clear error and exit status: the output's folder removed mid-run, a reader that
goes away, a damaged job store."""
from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from click.testing import CliRunner
from tests.support.fakes import FakeScorer, touch

from vqa import cli
from vqa.errors import OutputError, UsageError
from vqa.jobstore import Identity, JobStore
from vqa.outputs import RecordFile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def invoke(*args):
    return CliRunner().invoke(cli.cli, [*map(str, args)])


def make_folder(tmp_path, n=6):
    d = tmp_path / "in"
    for k in range(n):
        touch(d / f"clip{k}.mp4").write_bytes(b"x" * (k + 1))
    return d


def paths_in(path) -> list[str]:
    return [json.loads(line)["path"] for line in path.read_text().splitlines()]


class RemovesTheOutputFolder(FakeScorer):
    """Removes the output's folder (``rm -rf``) while the third video is scored."""

    folder = None

    def submit(self, p, split=False):
        if len(self.seen) == 2:
            shutil.rmtree(self.folder)
        return super().submit(p)


def test_the_output_folder_removed_mid_run_is_e_output_exit_3_and_resume_completes(monkeypatch, tmp_path):
    folder = make_folder(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out, db = out_dir / "r.jsonl", tmp_path / "j.db"
    RemovesTheOutputFolder.folder = out_dir
    monkeypatch.setattr(cli.score, "_make_scorer", RemovesTheOutputFolder)
    first = invoke("score", folder, "--output", out, "--db", db)
    # Before: a FileNotFoundError traceback from the rename, after a summary saying all went well.
    assert first.exit_code == 3, first.output
    assert "E_OUTPUT" in first.stderr and "re-run to resume" in first.stderr
    assert first.exception is None or isinstance(first.exception, SystemExit)
    out_dir.mkdir()
    FakeScorer.instances = []
    monkeypatch.setattr(cli.score, "_make_scorer", FakeScorer)
    again = invoke("score", folder, "--output", out, "--db", db)
    assert again.exit_code == 0, again.output
    assert sorted(paths_in(out)) == sorted(str(p) for p in folder.iterdir())  # each once
    assert "6 from the job store" in again.stderr  # none scored twice


FAKE_COMMAND = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import vqa.cli
    from tests.support.fakes import FakeScorer
    vqa.cli.score._make_scorer = FakeScorer
    if __name__ == "__main__":
        vqa.cli.main(sys.argv[1:])
""")


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_a_reader_that_went_away_is_exit_141_not_success(tmp_path, fmt):
    folder = make_folder(tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first record: `vqa score DIR | true`
    try:
        proc = subprocess.run([sys.executable, "-c", FAKE_COMMAND.format(root=ROOT), "score", str(folder),
                               "--format", fmt], stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              timeout=60)
    finally:
        os.close(write)
    # Before: exit 0 ("every video was scored") and not a word, with no record written.
    assert proc.returncode == 141, proc.stderr
    assert "reader went away, 0 of 6 videos" in proc.stderr and "Traceback" not in proc.stderr


def test_a_damaged_job_store_is_refused_before_anything_is_scored(fake, tmp_path):
    folder = make_folder(tmp_path, n=40)
    out, db = tmp_path / "r.jsonl", tmp_path / "j.db"
    assert invoke("score", folder, "--output", out, "--db", db, "--timeline").exit_code == 0
    size = db.stat().st_size
    assert size > 8 * 4096
    with open(db, "r+b") as f:  # a bad sector, past the first pages
        f.seek(size // 2)
        f.write(b"\xff" * 4096)
    FakeScorer.instances = []
    again = invoke("score", folder, "--output", out, "--db", db, "--timeline")
    # Before: E_INTERNAL ("a bug: please report it"), exit 3, at the same video on every run.
    assert again.exit_code == 2, again.output
    assert "E_INTERNAL" not in again.stderr and "malformed" in again.stderr
    assert "delete it" in again.stderr and "\n" not in again.stderr.strip()
    assert FakeScorer.instances == []  # refused before the model is loaded
    assert len(paths_in(out)) == 40  # the last good output is left as it was
    db.unlink()  # as the message says
    third = invoke("score", folder, "--output", out, "--db", db, "--timeline")
    assert third.exit_code == 0 and sorted(paths_in(out)) == sorted(str(p) for p in folder.iterdir())


class _Damaged:
    def execute(self, *args):
        raise sqlite3.DatabaseError("database disk image is malformed")


def test_a_store_damaged_mid_run_is_e_output_naming_it(tmp_path):
    store = JobStore(str(tmp_path / "j.db"))
    real, store._db = store._db, _Damaged()
    try:
        identity = Identity(b"/v.mp4", 1, 1, "f")
        with pytest.raises(OutputError, match="job store .*j.db.*malformed.*delete it"):
            store.status(identity, "k")
        with pytest.raises(OutputError, match="malformed"):
            store.put(identity, "k", {"status": "ok"})
    finally:
        store._db = real
        store.close()


LIMITED = textwrap.dedent("""
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (40 * 1024, 40 * 1024))
""")


def test_a_rerun_on_a_disk_still_full_keeps_the_larger_output(fake, tmp_path):
    folder = make_folder(tmp_path, n=300)
    out, db = tmp_path / "r.jsonl", tmp_path / "j.db"
    assert invoke("score", folder, "--output", out, "--db", db).exit_code == 0
    before = out.read_bytes()
    assert len(before) > 48 * 1024
    # The same command again, where no file may grow past 40 KiB (a disk still full): the store
    # needs no write, the new output stops part way.
    proc = subprocess.run([sys.executable, "-c", LIMITED + FAKE_COMMAND.format(root=ROOT), "score",
                           str(folder), "--output", str(out), "--db", str(db)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 3 and "E_OUTPUT" in proc.stderr, proc.stderr
    # Before: the 300-record output was swapped for the 40 KiB this run could write.
    assert out.read_bytes() == before
    assert not any(p.name.endswith(".vqa-partial") for p in tmp_path.iterdir())


def test_a_run_stopped_by_a_full_disk_still_puts_its_records_in_place(tmp_path):
    folder = make_folder(tmp_path, n=300)
    out, db = tmp_path / "r.jsonl", tmp_path / "j.db"
    out.write_text("")  # smaller than what this run writes: replaced, as before
    proc = subprocess.run([sys.executable, "-c", LIMITED + FAKE_COMMAND.format(root=ROOT), "score",
                           str(folder), "--output", str(out), "--db", str(db)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert 0 < len(paths_in(out)) < 300


SLOW_COMMAND = FAKE_COMMAND.replace("vqa.cli.score._make_scorer = FakeScorer", textwrap.dedent("""\
    from tests.support.fakes import held_scorer
    vqa.cli.score._make_scorer = held_scorer(free=1)  # one record, then it waits for the signal"""))


@pytest.mark.parametrize("with_store", [False, True])
def test_an_interrupted_run_says_resume_only_when_a_store_can_resume_it(tmp_path, with_store):
    folder = make_folder(tmp_path, n=200)
    store = ["--db", str(tmp_path / "j.db")] if with_store else []
    proc = subprocess.Popen([sys.executable, "-c", SLOW_COMMAND.format(root=ROOT), "score", str(folder),
                             *store], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # a record is out: the job runs
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "interrupted" in err
    # Before: "run the same command to resume" also without a store, where a re-run starts over.
    assert ("run the same command to resume" in err) == with_store


@pytest.mark.parametrize("failing", [False, True])
def test_a_stderr_reader_that_went_away_changes_no_exit_status(tmp_path, failing):
    folder = make_folder(tmp_path)
    if failing:
        touch(folder / "z_bad.mp4").write_bytes(b"x")
    out = tmp_path / "r.jsonl"
    read, write = os.pipe()
    os.close(read)  # `vqa score DIR -o FILE 2>&1 | head -0`: the summary line has no reader
    try:
        proc = subprocess.run([sys.executable, "-c", FAKE_COMMAND.format(root=ROOT), "score", str(folder),
                               "--output", str(out)], stdout=subprocess.DEVNULL, stderr=write, cwd=ROOT,
                              timeout=60)
    finally:
        os.close(write)
    # Before: the summary's BrokenPipeError made a finished job exit 1 (with a traceback to nowhere).
    assert proc.returncode == (1 if failing else 0)
    assert len(paths_in(out)) == len(list(folder.iterdir()))


class _Full:
    def execute(self, *args):
        raise sqlite3.OperationalError("database or disk is full")


def test_a_full_disk_under_the_store_is_not_called_damage(tmp_path):
    store = JobStore(str(tmp_path / "j.db"))
    real, store._db = store._db, _Full()
    try:
        with pytest.raises(OutputError) as caught:
            store.put(Identity(b"/v.mp4", 1, 1, "f"), "k", {"status": "ok"})
        assert "free some space" in str(caught.value) and "delete it" not in str(caught.value)
    finally:
        store._db = real
        store.close()


@contextlib.contextmanager
def file_size_limit(limit: int):
    """No file this process writes may grow past ``limit`` bytes (a write past it: EFBIG)."""
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, previous)


@pytest.mark.parametrize("another_writer", [False, True])
def test_a_full_disk_on_an_appended_file_cuts_only_its_own_half_record(tmp_path, another_writer):
    log = tmp_path / "log.jsonl"
    earlier = b'{"path": "earlier"}\n' * 200  # 4,000 bytes: another day's records
    log.write_bytes(earlier)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)  # as systemd's append: opens it: offset 0
    f = RecordFile(fd)
    try:
        f.write('{"path": "a"}\n')
        f.flush()
        if another_writer:  # a second job appending to the same log
            with open(log, "ab") as other:
                other.write(b'{"path": "other"}\n')
        with file_size_limit(len(earlier) + 100), pytest.raises(OSError):
            f.write('{"path": "b", "pad": "' + "x" * 300 + '"}\n')
            f.flush()
    finally:
        f.discard()
        f.close()
    text = log.read_bytes()
    # Before: cut back to this writer's own count of bytes (14), from the file's start: the
    # 4,000 earlier bytes (and the other job's record) were gone.
    assert text.startswith(earlier + b'{"path": "a"}\n')
    if another_writer:
        assert b'{"path": "other"}\n' in text
    else:
        assert text == earlier + b'{"path": "a"}\n'  # the half record is cut off


def test_a_second_job_that_loses_the_race_for_a_new_store_leaves_it_alone(monkeypatch, tmp_path):
    path = tmp_path / "j.db"
    with JobStore(str(path)) as first:
        first.put(Identity(b"/v.mp4", 1, 1, "f"), "k", {"status": "ok"})
        # The second job looked before the first made the file (both saw none), then was refused.
        monkeypatch.setattr("vqa.jobstore.os.path.lexists", lambda p: False)
        with pytest.raises(UsageError, match="another vqa job"):
            JobStore(str(path))
        monkeypatch.undo()
        # Before: the refused job deleted the live store (and its -wal), as its own new file:
        # the first job's records went with it, and a third job could open a new one beside it.
        assert path.exists() and os.path.exists(f"{path}-wal")
        assert first.count() == 1
    with JobStore(str(path)) as again:
        assert again.count() == 1
