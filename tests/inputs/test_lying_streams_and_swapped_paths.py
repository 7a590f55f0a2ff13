"""Issue 9, untrusted files and paths: shapes, lengths and canvases that lie (tests/support/lying_streams.py),
files swapped between the walk and the open, trees deeper than PATH_MAX, allocation failures.

Through the real `vqa score` command, and the mechanisms underneath on their own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner
from tests.support.malformed_media import good_clip
from tests.support.lying_streams import CASES, gif_huge_canvas, mkv_duration_10h

import vqa.job
from vqa import cli
from vqa.errors import InputError
from vqa.files import FoundPath, open_input
from vqa.inputs import expand_inputs, walk_videos

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 240


def score_cli(*args, timeout=DEADLINE_S):
    return subprocess.run([sys.executable, "-m", "vqa.cli", "score", *map(str, args)],
                          capture_output=True, timeout=timeout, cwd=ROOT)


def records_of(out) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


# --- items 1-4: each case gets its record, quickly, decoding a bounded number of frames ------

@pytest.mark.slow
def test_streams_that_lie_through_the_cli(tmp_path_factory, tmp_path, validate_record):
    root = tmp_path_factory.mktemp("uploads2")
    made = {}
    for name, (make, *_expected) in CASES.items():
        folder = root / name
        folder.mkdir()
        made[name] = make(folder)
    good_clip(root, "good.mp4")
    out = tmp_path / "r.jsonl"
    started = time.monotonic()
    proc = score_cli(root, "--glob", "*", "--output", out, "--workers", "2")
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr.decode()
    by_path = {r["path"]: validate_record(r) for r in records_of(out)}
    assert len(by_path) == len(CASES) + 1 and by_path[str(root / "good.mp4")]["status"] == "ok"
    for name, (_make, status, code, warnings, most_decoded) in CASES.items():
        r = by_path[made[name]]
        assert (r["status"], (r["error"] or {}).get("code")) == (status, code), (name, r["error"])
        for w in warnings:
            assert any(x.startswith(w) for x in r["warnings"]), (name, r["warnings"])
        if status == "ok":
            assert 0 < r["frames"]["sampled"] <= 32, name
            assert r["frames"]["decoded"] <= most_decoded, (name, r["frames"])
    # Before: 260 s for one 20,000-frame file, the GIF over 300 s, and 8192x1 frames gigabytes.
    assert elapsed < 90, elapsed


@pytest.mark.slow
def test_declared_10_hours_holding_1_second_is_scored_from_what_is_there(tmp_path):
    from vqa import Scorer

    path = mkv_duration_10h(tmp_path)
    # Own scorers, closed here: a session-wide pool would outlive this test's shared memory.
    with Scorer(workers=2) as scorer:
        r = scorer.score(path)
    assert r.status == "ok", r.error
    assert r.frames["sampled"] == 25 and round(r.video.duration_s) == 1  # measured at open
    assert any(w.startswith("W_TRUNCATED") for w in r.warnings)
    # OpenCV cannot measure: its runs all lie past the end, so the frames from the start stand in.
    with Scorer(workers=2, decoder="opencv") as scorer:
        r = scorer.score(path)
    assert r.status == "ok", r.error
    assert r.frames["sampled"] == 25 and any(w.startswith("W_TRUNCATED") for w in r.warnings)


GIF = textwrap.dedent("""
    import sys, time
    from vqa.decode import open_video
    from vqa.sample import plan_frames
    started = time.monotonic()
    with open_video(sys.argv[1]) as reader:
        frames = len(list(reader.read(plan_frames(reader.info))))
        capped = any(w.startswith("W_CAPPED") for w in reader.warnings)
    print(frames, reader.frames_decoded, capped, time.monotonic() - started)
""")


@pytest.mark.slow
def test_a_huge_gif_canvas_decodes_within_the_plan_budget(tmp_path):
    # In a process of its own: 4096x4096 canvases would raise this one's peak RSS for good,
    # which other tests measure in their children (ru_maxrss survives fork and exec).
    path = gif_huge_canvas(tmp_path, frames=300, size=4096)
    proc = subprocess.run([sys.executable, "-c", GIF, path], capture_output=True, text=True, cwd=ROOT, timeout=120)
    frames, decoded, capped, seconds = proc.stdout.split()
    assert 0 < int(frames) <= 32 and int(decoded) <= 2032 * 2 // 8 + 8 and capped == "True", proc.stdout
    assert float(seconds) < 30


def test_a_long_scan_that_stops_short_of_the_end_trusts_the_header(tmp_path, monkeypatch):
    """A short clip of many bytes: the measure reads part of it, and finds nothing wrong."""
    import vqa.decode.pyav as pyav
    from vqa.decode import open_video

    path = good_clip(tmp_path, "plain.mp4")
    with open_video(path) as reader:
        honest = reader.info
    monkeypatch.setattr(pyav, "MEASURE_MAX_BYTES", 2000)
    with open_video(path) as reader:
        assert reader.info.duration_s == honest.duration_s and reader.warnings == []


OOM = textwrap.dedent("""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY))
    import cv2, numpy as np
    from vqa.limits import out_of_memory
    try:
        cv2.resize(np.zeros((8, 8, 3), np.uint8), (60000, 60000))
    except Exception as e:
        print(type(e).__module__, out_of_memory(e))
""")


def test_an_opencv_allocation_failure_counts_as_out_of_memory():
    proc = subprocess.run([sys.executable, "-c", OOM], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.split() == ["cv2", "True"], proc.stderr


# --- item 5: where a file leads is checked when it is opened ----------------------------------

@pytest.fixture
def swap_tree(tmp_path):
    root = tmp_path / "uploads"
    (root / "sub").mkdir(parents=True)
    good_clip(root, "a.mp4")
    good_clip(root / "sub", "b.mp4", seed=1)
    outside = tmp_path / "secret"
    outside.mkdir()
    good_clip(outside, "a.mp4", seed=2)
    good_clip(outside, "b.mp4", seed=3)
    return root, outside


def _swap(root, outside):
    """What an uploader does between the walk and the open: a file and a folder become links."""
    os.unlink(root / "a.mp4")
    os.symlink(outside / "a.mp4", root / "a.mp4")
    os.rename(root / "sub", root / "sub_old")
    os.symlink(outside, root / "sub", target_is_directory=True)


def test_a_file_or_folder_swapped_for_a_link_after_the_walk_is_refused_at_open(swap_tree):
    root, outside = swap_tree
    found = [i.path for i in expand_inputs([str(root)])]
    assert all(isinstance(p, FoundPath) for p in found)
    _swap(root, outside)
    for p in found:
        with pytest.raises(InputError) as err:
            open_input(p)
        assert err.value.code == "E_BAD_PATH" and "outside" in err.value.message
    open_input(str(root / "a.mp4"))  # named by the user, not found by walking: followed


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_swap_between_walk_and_open_through_the_cli(swap_tree, monkeypatch, tmp_path, workers):
    root, outside = swap_tree
    real_expand = vqa.job.expand_inputs  # the folder job expands the paths (vqa.job.FolderJob)

    def expand_then_swap(*args, **kwargs):
        inputs = real_expand(*args, **kwargs)
        _swap(root, outside)
        return inputs

    monkeypatch.setattr(vqa.job, "expand_inputs", expand_then_swap)
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(cli.cli, ["score", str(root), "--output", str(out), "--workers", str(workers)])
    assert result.exit_code == 1, result.output
    records = records_of(out)
    assert [os.path.relpath(r["path"], root) for r in records] == ["a.mp4", "sub/b.mp4"]
    assert [r["error"]["code"] for r in records] == ["E_BAD_PATH", "E_BAD_PATH"]


# --- item 6: trees deeper than PATH_MAX -------------------------------------------------------

def _deep_tree(root, levels: int, clip: bytes) -> None:
    """``levels`` folders of 9-byte names, a clip at the bottom: its path passes PATH_MAX
    (4096), so the tree is made through folder descriptors."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("deepfolder"[:9], dir_fd=fd)
            child = os.open("deepfolde", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("deep.mp4", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, clip)
        os.close(out)
    finally:
        os.close(fd)


@pytest.fixture
def deep(tmp_path):
    root = tmp_path / "deep"
    root.mkdir()
    clip = open(good_clip(tmp_path, "top.mp4"), "rb").read()
    (root / "top.mp4").write_bytes(clip)
    _deep_tree(root, 500, clip)
    return root


def test_the_walk_reaches_past_path_max(deep):
    found = walk_videos(str(deep))
    assert len(found) == 2 and len(os.fsencode(found[0])) > 4096
    with pytest.raises(InputError) as err:
        open_input(found[0])
    assert err.value.code == "E_BAD_PATH" and "PATH_MAX" in err.value.message


@pytest.mark.slow
def test_every_clip_of_a_deep_tree_gets_a_record_and_the_status_says_so(deep, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = score_cli(deep, "--output", out, "--workers", "1")
    assert proc.returncode == 1, proc.stderr.decode()
    records = records_of(out)
    assert [r["status"] for r in records] == ["error", "ok"]  # sorted: deepfolde/... < top.mp4
    assert records[0]["error"]["code"] == "E_BAD_PATH" and records[0]["path"].endswith("/deep.mp4")
    assert "2 videos: 1 ok, 1 failed" in proc.stderr.decode()


def test_an_unreadable_subfolder_gets_a_record(tmp_path, monkeypatch):
    root = tmp_path / "t"
    (root / "locked").mkdir(parents=True)
    good_clip(root, "a.mp4")
    real_scandir = os.scandir

    def scandir(target):  # root reads every folder: refuse one as another user would see it
        if isinstance(target, int) and os.readlink(f"/proc/self/fd/{target}").endswith("/locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(target)

    monkeypatch.setattr(os, "scandir", scandir)
    got = expand_inputs([str(root)])
    assert [(os.path.basename(i.path), i.error and i.error[0]) for i in got] == [
        ("a.mp4", None), ("locked", "E_UNREADABLE")]
