"""Issue 17, item 12: a resource the machine lacks is the run's error, not the videos'. With
/dev/shm nearly full (a private tmpfs mounted over it, in a mount namespace of the test's own),
`vqa score` stops with one clear error naming /dev/shm and its size, exit status 2, and stores
no failure for any video: the next run, with room, scores them all."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.engine import private_mounts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("uploads")
    for k in range(3):
        write_clip(root / f"clip{k}.mp4", textured_frames(12, 96, 128, seed=k))
    return root


def test_a_nearly_full_dev_shm_is_the_runs_error_not_each_videos(folder, tmp_path):
    prefix = private_mounts()
    if prefix is None:
        pytest.skip("cannot mount a tmpfs over /dev/shm here (needs root or unprivileged user namespaces)")
    out, db = tmp_path / "r.jsonl", tmp_path / "r.db"
    score = f"{sys.executable} -m vqa.cli score {folder} --output {out} --db {db} --workers 1 --frames 8"
    # 8 MiB of which 7.5 are taken: less than the ring of one worker (2 MiB) is free.
    cmd = ("mount -t tmpfs -o size=8m tmpfs /dev/shm && head -c 7864320 /dev/zero > /dev/shm/filler && "
           + score)
    full = subprocess.run([*prefix, "sh", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert full.returncode == 2, full.stderr
    assert "E_RESOURCE" in full.stderr and "/dev/shm" in full.stderr and "MiB free of 8 MiB" in full.stderr
    assert "E_WORKER_CRASH" not in full.stderr and "Traceback" not in full.stderr
    if db.exists():  # nothing stored as a video's failure
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0
    assert not out.exists() or out.read_text() == ""

    roomy = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64m tmpfs /dev/shm && " + score],
                           capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                           timeout=300)
    assert roomy.returncode == 0, roomy.stderr
    assert [json.loads(line)["status"] for line in out.read_text().splitlines()] == ["ok"] * 3
