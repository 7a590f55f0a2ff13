"""Untrusted files (issue 9): shapes, lengths and canvases that lie (tests/support/lying_streams.py),
and allocation failures. Paths that change under the walk are in test_swapped_and_deep_paths.py.

Through the real `vqa score` command, and the mechanisms underneath on their own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from tests.support.malformed_media import good_clip
from tests.support.lying_streams import CASES, gif_huge_canvas, mkv_duration_10h


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
