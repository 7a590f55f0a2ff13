"""Issue 17, write paths: every file the product writes (``vqa score --output``, ``vqa score
--report``, ``vqa report -o``) is written by the same rules (vqa.outputs.open_destination):
devices and FIFOs directly, a temporary file created exclusively without following links, only
whole records after a full disk, a live writer's file locked, derived names within 255 bytes."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from click.testing import CliRunner
from tests.support.engine import private_mounts
from tests.support.fakes import touch
from tests.support.synthetic_records import synthetic_records

from vqa import cli
from vqa.jobstore import default_db_path
from vqa.outputs import partial_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def invoke(*args):
    return CliRunner().invoke(cli.cli, [*map(str, args)])


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "in"
    for name in ["a.mp4", "b.mp4", "c.mkv"]:
        touch(d / name).write_bytes(name.encode() * 100)
    return d


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(5, with_timeline=False)))
    return path


# Each writer, as a user reaches it: (name, how to write PATH).
def _score_output(folder, results, path):
    return invoke("score", folder, "--output", path, "--db", folder.parent / "j.db")


def _score_report(folder, results, path):
    return invoke("score", folder, "--output", folder.parent / "r.jsonl", "--report", path, "--thumbnails", 0)


def _report(folder, results, path):
    return invoke("report", results, "-o", path, "--thumbnails", 0)


WRITERS = {"score --output": _score_output, "score --report": _score_report, "report -o": _report}


@pytest.fixture(params=sorted(WRITERS))
def writer(request, fake):
    return WRITERS[request.param]


def _read_fifo(path, got: list):
    with open(path, "rb") as f:
        got.append(f.read())


def test_a_fifo_is_written_directly_by_every_writer(writer, folder, results, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=_read_fifo, args=(fifo, got), daemon=True)
    reader.start()
    result = writer(folder, results, fifo)
    reader.join(30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not replaced by a file
    assert got and got[0].strip(), "the reader got nothing"
    assert not os.path.lexists(partial_path(str(fifo)))


def test_a_link_to_a_character_device_is_written_through_never_replaced(writer, folder, results, tmp_path):
    link = tmp_path / "null"
    os.symlink(os.devnull, link)
    result = writer(folder, results, link)
    assert result.exit_code == 0, result.output
    assert os.path.islink(link) and os.readlink(link) == os.devnull
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_link_planted_at_the_temporary_name_is_never_written_through(writer, folder, results, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "page.html"
    os.symlink(victim, partial_path(str(out)))
    result = writer(folder, results, out)
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(out) and out.stat().st_size > 0
    assert not os.path.lexists(partial_path(str(out)))


def test_a_folder_or_block_device_as_destination_is_a_usage_error(writer, folder, results, tmp_path):
    target = tmp_path / "adir"
    target.mkdir()
    result = writer(folder, results, target)
    assert result.exit_code == 2 and ("is a folder" in result.output or "is a directory" in result.output)
    assert "Traceback" not in result.output and target.is_dir() and not os.listdir(target)


def test_a_250_byte_output_name_works_and_derived_names_fit(fake, folder, tmp_path):
    out = tmp_path / ("r" * 244 + ".jsonl")  # 250 bytes: legal
    result = invoke("score", folder, "--output", out, "--report", tmp_path / ("p" * 250), "--thumbnails", 0)
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 3
    db = default_db_path(str(out))
    assert os.path.exists(db) and len(os.path.basename(db).encode()) + len("-journal") <= 255
    assert len(os.path.basename(partial_path(str(out))).encode()) <= 255
    assert partial_path(str(out)) != partial_path(str(tmp_path / ("r" * 244 + ".jsonx")))  # still unique


def test_a_multibyte_name_is_shortened_on_a_character_boundary(tmp_path):
    name = "é" * 125  # 250 bytes
    shortened = os.path.basename(partial_path(str(tmp_path / name)))
    assert len(shortened.encode()) <= 255 and shortened.endswith(".vqa-partial")
    shortened.encode("utf-8")  # no half character: would raise on a lone surrogate


HELD_JOB = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import vqa.cli.score
    from tests.support.fakes import held_scorer

    vqa.cli.score._make_scorer = held_scorer(free=1, go={go!r})  # one record, then it waits for go
    vqa.cli.main(sys.argv[1:])
""")


def test_a_second_live_job_on_the_same_output_is_refused_and_the_first_finishes(fake, tmp_path):
    folder = tmp_path / "in"
    for k in range(15):
        touch(folder / f"clip{k:02d}.mp4").write_bytes(b"x")
    out = tmp_path / "r.jsonl"
    go = tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", HELD_JOB.format(root=ROOT, go=str(go)), "score", str(folder),
                              "--output", str(out), "--db", str(tmp_path / "one.db")],
                             stderr=subprocess.PIPE, text=True, cwd=ROOT)
    partial = partial_path(str(out))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (os.path.exists(partial) and os.path.getsize(partial)):
        time.sleep(0.05)
    second = invoke("score", folder, "--output", out, "--db", tmp_path / "two.db")
    go.touch()  # the first job is live until now
    _, err = first.communicate(timeout=60)
    assert second.exit_code == 2 and "another vqa job is writing" in second.output, second.output
    assert first.returncode == 0, err
    assert len(out.read_text().splitlines()) == 15


def test_a_killed_runs_leftover_is_not_taken_for_a_live_job(fake, folder, tmp_path):
    out = tmp_path / "r.jsonl"
    with open(partial_path(str(out)), "w") as f:
        f.write('{"half": ')  # a killed run's: nobody holds it
    assert invoke("score", folder, "--output", out).exit_code == 0
    assert len(out.read_text().splitlines()) == 3


# --- a full disk: only whole records ----------------------------------------------------------

FULL_DISK = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import vqa.cli.score
    from tests.support.fakes import FakeScorer
    from vqa.types import VideoScore

    class Wordy(FakeScorer):  # records of about 1.5 KiB, so one crosses a page boundary
        def submit(self, p, split=False):
            future = super().submit(p)
            future.result().warnings.append("w" * 1500)
            return future

    vqa.cli.score._make_scorer = Wordy
    vqa.cli.main(sys.argv[1:])
""")


def test_after_a_full_disk_the_output_holds_only_whole_records(tmp_path):
    prefix = private_mounts()
    if prefix is None:
        pytest.skip("cannot mount a small tmpfs here (needs root or unprivileged user namespaces)")
    folder = tmp_path / "in"
    for k in range(200):
        touch(folder / f"clip{k:03d}.mp4").write_bytes(b"x")
    small = tmp_path / "small"
    small.mkdir()
    out = small / "r.jsonl"
    script = FULL_DISK.format(root=ROOT)
    cmd = (f"mount -t tmpfs -o size=64k tmpfs {small} && "
           f"{sys.executable} -c \"$SCRIPT\" score {folder} --output {out} --db {tmp_path / 'j.db'}; "
           f"rc=$?; cp {out} {tmp_path / 'copy.jsonl'}; exit $rc")
    proc = subprocess.run([*prefix, "sh", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "SCRIPT": script}, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "E_OUTPUT" in proc.stderr and "Traceback" not in proc.stderr
    text = (tmp_path / "copy.jsonl").read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]  # each line whole
    assert 0 < len(records) < 200


def test_a_db_name_sqlite_cannot_extend_is_refused_saying_why(fake, folder, tmp_path):
    result = invoke("score", folder, "--output", tmp_path / "r.jsonl", "--db", tmp_path / ("d" * 250))
    assert result.exit_code == 2 and "too long" in result.output and "-journal" in result.output


def test_a_link_planted_at_the_derived_job_store_name_is_refused(fake, folder, tmp_path):
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"")  # empty: a store would be made in it through the link
    out = tmp_path / "r.jsonl"
    os.symlink(victim, default_db_path(str(out)))
    result = invoke("score", folder, "--output", out)
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output
    assert victim.read_bytes() == b""
    assert invoke("score", folder, "--output", out, "--db", victim).exit_code == 0  # chosen: followed


# --- names for a descriptor, and empty names (the third attack) ------------------------------

FAKE_JOB = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import vqa.cli.score
    from tests.support.fakes import FakeScorer

    vqa.cli.score._make_scorer = FakeScorer
    vqa.cli.main(sys.argv[1:])
""")


# Not /dev/stdout itself: a regression would replace the machine's link (it did, as root).
@pytest.mark.parametrize("name", ["link", "/proc/self/fd/1", "/dev/fd/1"])
def test_a_name_for_stdout_is_written_through_and_gets_no_store(folder, tmp_path, name):
    # A link to /proc/self/fd/1 (/dev/stdout is one) was replaced by a regular file, and the
    # output redirected to a file stayed empty; /dev/fd/1 gave "cannot write the job store".
    if name == "link":
        name = str(tmp_path / "mystdout")
        os.symlink("/proc/self/fd/1", name)
    out = tmp_path / "redirected.jsonl"
    with open(out, "w") as f:
        proc = subprocess.run([sys.executable, "-c", FAKE_JOB.format(root=ROOT), "score", str(folder), "-q",
                               "--output", name], stdout=f, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["path"] for line in out.read_text().splitlines()] == sorted(
        str(p) for p in folder.iterdir())
    if name.startswith(str(tmp_path)):
        assert os.path.islink(name) and os.readlink(name) == "/proc/self/fd/1"
    assert sorted(os.listdir(tmp_path)) == sorted(["in", "redirected.jsonl"] + (
        ["mystdout"] if name.startswith(str(tmp_path)) else []))


def test_a_device_output_gets_no_job_store_beside_it(fake, folder, tmp_path):
    link = tmp_path / "null"
    os.symlink(os.devnull, link)
    result = invoke("score", folder, "--output", link)
    assert result.exit_code == 0, result.output
    assert not os.path.exists(default_db_path(str(link))) and not os.path.exists(os.devnull + ".vqa.db")


@pytest.mark.parametrize("args", [["--output", ""], ["--db", ""], ["--report", ""], ["--output", " "]])
def test_an_empty_name_is_a_usage_error_before_anything_is_written(fake, folder, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = invoke("score", folder, *args)
    assert result.exit_code == 2 and "is empty: give a file name" in result.output, result.output
    assert "Traceback" not in result.output and sorted(os.listdir(tmp_path)) == ["in"]


def test_report_to_an_empty_name_is_a_usage_error(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("report", results, "-o", "")
    assert result.exit_code == 2 and "is empty" in result.output, result.output
    assert sorted(os.listdir(tmp_path)) == ["results.jsonl"]
