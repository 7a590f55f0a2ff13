"""CLI tests, in-process with CliRunner. The scorer is faked: no model is needed here."""
from __future__ import annotations

import csv
import io
import json
from concurrent.futures import Future
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from tests.support.fakes import FakeScorer, touch

from vqa import cli
from vqa.config import ScoreOptions
from vqa.errors import ModelError, UsageError
from vqa.inputs import expand_inputs, walk_videos


def run(*args, **kwargs):
    return CliRunner().invoke(cli.cli, list(args), **kwargs)


def jsonl(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


# --- help, version and usage errors -------------------------------------------------

def test_help_lists_formats_and_exit_codes():
    result = run("score", "--help")
    assert result.exit_code == 0
    for word in ("table|json|jsonl|csv", "--frames", "--backend", "--decoder",
                 "--batch-size", "--model-dir", "--output", "Exit status", "VQA_DEBUG"):
        assert word in result.output
    top = run("--help")
    assert top.exit_code == 0 and "score" in top.output


@pytest.mark.parametrize("command", [["score", "--help"], ["--help"]])
def test_the_exit_status_table_keeps_its_lines(command):
    # The epilog began with a backslash and a "b", not click's "\b": the table ran together.
    lines = run(*command).output.splitlines()
    at = lines.index("  Exit status:")
    assert lines[at + 1].split() == ["0", "every", "video", "was", "scored"]
    assert not any("\\b" in line for line in lines)


def test_a_thousand_workers_is_a_usage_error_saying_the_limit(fake, tmp_path, monkeypatch):
    # 1,000 workers on 2 cores ran past two minutes starting processes for one video.
    monkeypatch.setattr("vqa.threads.usable_cores", lambda *a, **k: 2)
    clip = touch(tmp_path / "a.mp4")
    result = run("score", str(clip), "--workers", "1000")
    assert result.exit_code == 2 and "limit of 16" in result.output and fake.instances == [], result.output
    assert run("score", str(clip), "--workers", "16", "--format", "jsonl").exit_code == 0


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.output.startswith("vqa ")


@pytest.mark.parametrize("args", [
    ["score", "x.mp4", "--format", "xml"],
    ["score", "x.mp4", "--frames", "some"],
    ["score", "x.mp4", "--frames", "0"],
    ["score", "x.mp4", "--batch-size", "0"],
    ["score", "x.mp4", "--backend", "tensorflow"],
    ["score", "x.mp4", "--no-such-flag"],
    ["score"],
    ["frobnicate"],
])
def test_bad_options_exit_2(fake, args):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert fake.instances == []


def test_frames_parsing():
    from vqa.cli.common import Parsed
    from vqa.config import _parse_frames
    t = Parsed("frames", _parse_frames)
    assert t.convert("ALL", None, None) == "all"
    assert t.convert("default", None, None) == "default"
    assert t.convert(" 32 ", None, None) == 32


@pytest.mark.parametrize("error", [UsageError("batch too big"), ModelError("model.xml missing"),
                                   ModelError("gone", code="E_MODEL_MISSING")])
def test_construction_error_is_one_clean_line(monkeypatch, tmp_path, error):
    def boom(*_, **__):
        raise error
    monkeypatch.setattr(cli.score, "_make_scorer", boom)
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    result = run("score", str(touch(tmp_path / "a.mp4")))
    assert result.exit_code == 2
    assert result.stderr == f"error: {error.code}: {error.message}\n"
    assert result.stdout == ""
    monkeypatch.setenv("VQA_DEBUG", "1")
    result = run("score", str(tmp_path / "a.mp4"))
    assert result.exception is error


def test_no_videos_in_folder_is_a_job_with_nothing_to_do(fake, tmp_path):
    touch(tmp_path / "notes.txt")  # issue 17: an empty upload folder is no mistake (exit 0)
    result = run("score", str(tmp_path))
    assert result.exit_code == 0 and result.stdout == ""
    assert "no video files found" in result.stderr and "vqa: 0 videos" in result.stderr


def test_internal_error_mid_run_exit_3(monkeypatch, tmp_path):
    class Broken(FakeScorer):
        def submit(self, path):
            future = super().submit(path)
            if len(self.seen) > 1:  # the engine failed on the second video
                future = Future()
                future.set_exception(RuntimeError("worker died"))
            return future
    monkeypatch.setattr(cli.score, "_make_scorer", Broken)
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    a, b = touch(tmp_path / "a.mp4"), touch(tmp_path / "b.mp4")
    result = run("score", "--format", "json", str(a), str(b))
    assert result.exit_code == 3
    assert result.stderr == "error: E_INTERNAL: worker died\n"
    assert [r["path"] for r in json.loads(result.stdout)] == [str(a)]  # still valid JSON


# --- scoring with the fake scorer ------------------------------------------------------

def test_all_ok_exit_0_and_options_passed(fake, tmp_path):
    clip = touch(tmp_path / "clip.mp4")
    result = run("score", str(clip), "--frames", "24", "--backend", "pytorch",
                 "--decoder", "opencv", "--batch-size", "8", "--model-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert [r["path"] for r in jsonl(result.stdout)] == [str(clip)]  # jsonl when not a TTY
    (scorer,) = fake.instances
    assert scorer.options == ScoreOptions(backend="pytorch", decoder="opencv", frames=24, batch_size=8,
                                          model_dir=str(tmp_path))
    assert scorer.engine == {}
    assert scorer.closed


@pytest.mark.parametrize("args, limits", [
    ([], {}),  # the engine's auto limits
    (["--timeout", "0", "--worker-memory", "0"], {"timeout_s": None, "worker_memory_mb": None}),
    (["--timeout", "2.5", "--worker-memory", "1024"], {"timeout_s": 2.5, "worker_memory_mb": 1024}),
])
def test_limits_passed_to_the_scorer(fake, tmp_path, args, limits):
    clip = touch(tmp_path / "clip.mp4")
    assert run("score", str(clip), *args).exit_code == 0
    (scorer,) = fake.instances
    given = {k: getattr(scorer.options, k) for k in ("timeout_s", "worker_memory_mb")}
    assert given == {"timeout_s": "auto", "worker_memory_mb": "auto", **limits}


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_bad_timeout_is_a_usage_error(fake, tmp_path, value):
    clip = touch(tmp_path / "clip.mp4")
    assert run("score", str(clip), "--timeout", value).exit_code == 2


def test_missing_path_gets_record_in_order_and_exit_1(fake, tmp_path):
    a, c = touch(tmp_path / "a.mp4"), touch(tmp_path / "c.mp4")
    missing = str(tmp_path / "b.mp4")
    result = run("score", str(a), missing, str(c))
    assert result.exit_code == 1
    records = jsonl(result.stdout)
    assert [r["path"] for r in records] == [str(a), missing, str(c)]
    assert [r["status"] for r in records] == ["ok", "error", "ok"]
    assert records[1]["error"]["code"] == "E_NOT_FOUND"
    assert fake.instances[0].seen == [str(a), str(c)]  # the scorer never sees it


def test_failed_video_exit_1_each_has_record(fake, tmp_path):
    good, bad = touch(tmp_path / "good.mp4"), touch(tmp_path / "bad.mp4")
    result = run("score", "--format", "csv", str(good), str(bad))
    assert result.exit_code == 1
    rows = list(csv.DictReader(io.StringIO(result.stdout, newline="")))
    assert [(r["path"], r["status"], r["error_code"]) for r in rows] == [
        (str(good), "ok", ""), (str(bad), "error", "E_NOT_VIDEO")]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "table"])
def test_output_file(fake, tmp_path, fmt):
    clip = touch(tmp_path / "clip.mp4")
    out = tmp_path / f"out.{fmt}"
    result = run("score", str(clip), "--format", fmt, "--output", str(out))
    assert result.exit_code == 0 and result.stdout == ""
    text = out.read_text(encoding="utf-8")
    assert str(clip) in text
    if fmt == "json":
        assert json.loads(text)[0]["score"] == 70.0


def test_output_default_is_jsonl_for_file(fake, tmp_path):
    clip = touch(tmp_path / "clip.mp4")
    out = tmp_path / "results"
    assert run("score", str(clip), "-o", str(out)).exit_code == 0
    assert jsonl(out.read_text())[0]["path"] == str(clip)


def test_unwritable_output_is_usage_error(fake, tmp_path):
    clip = touch(tmp_path / "clip.mp4")
    result = run("score", str(clip), "-o", str(tmp_path / "no" / "such" / "dir" / "out.jsonl"))
    assert result.exit_code == 2 and "cannot write" in result.stderr


def test_table_format(fake, tmp_path):
    clip = touch(tmp_path / "clip.mp4")
    result = run("score", str(clip), "--format", "table")
    assert result.exit_code == 0
    assert "score  70.0   good" in result.stdout


# --- folder walking ------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "videos"
    for name in ["b.mp4", "a.MOV", "notes.txt", "sub/z.mkv", "sub/deeper/c.y4m",
                 "sub/readme.md", "a_dir/x.webm", "clip.mp4.part"]:
        touch(root / name)
    outside = tmp_path / "outside"
    touch(outside / "linked.mp4")
    os.symlink(outside, root / "link_dir", target_is_directory=True)
    os.symlink(outside / "linked.mp4", root / "file_link.ts")
    return root


def test_walk_videos_sorted_filtered_no_dir_symlinks(tree):
    rel = [os.path.relpath(p, tree) for p in walk_videos(str(tree))]
    assert rel == ["a.MOV", "a_dir/x.webm", "b.mp4", "file_link.ts",
                   "sub/deeper/c.y4m", "sub/z.mkv"]


def test_glob_patterns_replace_the_extension_list(tree):
    rel = [os.path.relpath(p, tree) for p in walk_videos(str(tree), patterns=["*.MP4", "*.txt"])]
    assert rel == ["b.mp4", "notes.txt"]


def test_a_linked_file_leading_out_of_its_folder_gets_e_bad_path(tree, tmp_path):
    inside = touch(tree / "sub" / "real.mkv")
    os.symlink(inside, tree / "in_link.mp4")
    got = {os.path.relpath(i.path, tree): i.error for i in expand_inputs([str(tree)])}
    assert got["file_link.ts"][0] == "E_BAD_PATH"  # -> ../outside/linked.mp4
    assert got["in_link.mp4"] is None and got["b.mp4"] is None


def test_expand_inputs_mixes_files_folders_and_missing(tree, tmp_path):
    warnings = []
    empty = tmp_path / "empty"
    empty.mkdir()
    explicit = touch(tmp_path / "weird.bin")  # given explicitly, so scored whatever its name
    got = expand_inputs([str(explicit), str(tree / "sub"), "missing.mp4", str(empty)],
                        warn=warnings.append)
    assert [i.path for i in got] == [str(explicit), str(tree / "sub/deeper/c.y4m"),
                                     str(tree / "sub/z.mkv"), "missing.mp4"]
    assert [i.error and i.error[0] for i in got] == [None, None, None, "E_NOT_FOUND"]
    assert warnings == [f"no video files found in {empty}"]


def test_folder_through_cli(fake, tree):
    result = run("score", str(tree))
    assert result.exit_code == 1  # file_link.ts leads outside the folder
    records = jsonl(result.stdout)
    assert len(records) == 6
    assert [r["error"]["code"] for r in records if r["status"] != "ok"] == ["E_BAD_PATH"]


def _named_twice(tree, tmp_path):
    """Paths that name three files, each more than once, a missing file twice, and a hard link
    (a name of its own); and the inputs they make."""
    clip = tree / "b.mp4"
    os.link(clip, tmp_path / "hard.mp4")
    os.symlink(clip, tmp_path / "soft.mp4")
    sub = tree / "sub"
    named = [str(sub), str(sub / "z.mkv"), f"{sub}/./z.mkv", str(clip), str(tmp_path / "soft.mp4"),
             "missing.mp4", "./missing.mp4", str(tmp_path / "hard.mp4"), f"{tmp_path}/../{tmp_path.name}/hard.mp4"]
    return named, [str(sub / "deeper" / "c.y4m"), str(sub / "z.mkv"), str(clip), "missing.mp4",
                   str(tmp_path / "hard.mp4")]


def test_a_file_named_or_found_twice_is_one_input(tree, tmp_path):
    warnings = []
    named, once = _named_twice(tree, tmp_path)
    assert [i.path for i in expand_inputs(named, warn=warnings.append)] == once
    assert warnings == [f"{named[1]!r} named a file already in the job, and 4 more paths did: "
                        "each file is scored once"]
    # A folder named through a link: what it finds is the file its real path names.
    os.symlink(tree / "sub", tmp_path / "sub_link", target_is_directory=True)
    got = expand_inputs([str(tree / "sub" / "z.mkv"), str(tmp_path / "sub_link")])
    assert [i.path for i in got] == [str(tree / "sub" / "z.mkv"), str(tmp_path / "sub_link" / "deeper" / "c.y4m")]


def test_a_file_named_twice_on_the_command_line_is_scored_and_recorded_once(fake, tree, tmp_path):
    named, once = _named_twice(tree, tmp_path)
    result = run("score", *named, "--format", "jsonl")
    assert [r["path"] for r in jsonl(result.stdout)] == once
    assert fake.instances[0].seen == once[:3] + once[4:]  # missing.mp4 is checked, never scored
    assert "each file is scored once" in result.stderr


def test_a_file_named_twice_in_a_script_is_scored_and_recorded_once(tree, tmp_path):
    from vqa.job import run_folder_job

    named, once = _named_twice(tree, tmp_path)
    FakeScorer.instances = []
    out = tmp_path / "out.jsonl"
    summary = run_folder_job(named, output=str(out), make_scorer=FakeScorer)
    assert [r["path"] for r in jsonl(out.read_text())] == once
    assert (summary.ok, summary.failed) == (4, 1) and FakeScorer.instances[0].seen == once[:3] + once[4:]


def test_cli_does_not_import_torch():
    code = ("import sys, vqa.cli; from vqa.cli import cli; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# --- the thread split (vqa.threads.starving_split) ----------------------------------------------

@pytest.mark.parametrize("args, warned", [
    (["--workers", "15"], "--workers 15 leaves inference 1 thread of 16 cores, where auto gives it 8"),
    (["--threads", "14"], "--threads 14 leaves decoding 2 workers of 16 cores, where auto gives it 8"),
    (["--workers", "12"], None),  # 4 inference threads: half of auto's, not starved
    ([], None),
])
def test_a_starving_split_is_said_once(fake, tmp_path, monkeypatch, args, warned):
    monkeypatch.setattr("vqa.threads.usable_cores", lambda *a, **k: 16)
    clip = touch(tmp_path / "a.mp4")
    result = run("score", str(clip), "--format", "jsonl", *args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    if warned is None:
        assert lines == []
    else:
        assert len(lines) == 1 and warned in lines[0] and "auto would use --workers 8 --threads 8" in lines[0]


@pytest.mark.parametrize("swallowed_as", ["an import error", "nothing"])
def test_a_stop_while_starting_is_a_stop_even_when_a_library_swallows_it(monkeypatch, tmp_path, swallowed_as):
    # SIGTERM's SystemExit, raised inside OpenVINO's native import, came out as "needs the
    # 'openvino' package" (exit 2); raised in a weakref callback, it was only printed and the
    # job ran on to exit 0. A scheduler must see 143 and retry.
    from vqa.errors import BackendUnavailable

    class StoppedWhileStarting(FakeScorer):
        def __init__(self, *args, **kwargs):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(2)  # the handler runs here
            except SystemExit:
                pass  # what the library did with it
            if swallowed_as == "an import error":
                raise BackendUnavailable("backend 'openvino' needs the 'openvino' package (initialization failed)")
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cli.score, "_make_scorer", StoppedWhileStarting)
    clip = touch(tmp_path / "a.mp4")
    result = run("score", str(clip), "--format", "jsonl")
    assert result.exit_code == 143, result.output
    assert "E_BACKEND" not in result.output
    assert run("score", str(clip), "--format", "jsonl").exit_code == 143  # (still the stopped class)
    monkeypatch.setattr(cli.score, "_make_scorer", FakeScorer)
    assert run("score", str(clip), "--format", "jsonl").exit_code == 0  # the next run starts clean


def test_ctrl_c_before_the_command_is_ready_is_130_without_a_traceback():
    # Ctrl-C in the first half second (the command still importing) printed a KeyboardInterrupt
    # traceback and ended with -2.
    code = ("import vqa.cli.app as app\n"
            "def interrupted(**kwargs):\n"
            "    raise KeyboardInterrupt\n"
            "app.cli.main = interrupted\n"
            "from vqa.cli import main\n"
            "main(['--help'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == "vqa: interrupted"
