"""kill -9 a real folder job at random moments, re-run it, and count the records.

Every video must end up in the output exactly once, whole, and a video finished before a
kill must not be scored again.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from tests.support.engine import stored


pytestmark = pytest.mark.slow

CLIPS = 30
KILLS = 4
SEED = int(os.environ.get("VQA_TEST_SEED", "20261130"))


def start(folder, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vqa.cli", "score", str(folder), "--output", str(out),
                             "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)



def test_kill_9_at_random_points_then_resume(make_clip, tmp_path):
    folder = tmp_path / "uploads"
    folder.mkdir()
    for i in range(CLIPS):
        shutil.copy(make_clip("clean"), folder / f"clip{i:02d}.mp4")
    (folder / "zz_broken.mp4").write_bytes(os.urandom(5000))  # an error record is a result too
    out = tmp_path / "results.jsonl"
    rng = random.Random(SEED)

    progress = []
    for k in range(KILLS):
        proc = start(folder, out)
        if k == 0:
            time.sleep(rng.uniform(0.2, 1.0))  # while the model loads
        else:  # mid-run: once a few more videos are stored, at a random moment after that
            target = len(stored(out)) + rng.randint(1, 6)
            deadline = time.monotonic() + 60
            while len(stored(out)) < target and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        progress.append(len(stored(out)))
    before_last = stored(out)
    assert 0 < len(before_last) < CLIPS + 1, f"seed {SEED}: no kill landed mid-job ({progress})"
    assert progress == sorted(progress), "the store lost rows across kills"

    proc = start(folder, out)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err.decode()  # zz_broken fails, as it should

    records = [json.loads(line) for line in out.read_text().splitlines()]  # all whole lines
    names = [os.path.basename(r["path"]) for r in records]
    assert names == sorted(os.listdir(folder)), f"seed {SEED}: kills left {progress} rows"
    assert all(r["status"] == "ok" for r in records[:-1]) and records[-1]["error"]["code"] == "E_NOT_VIDEO"
    after = stored(out)
    assert len(after) == CLIPS + 1
    # Rows from before the last run were not scored again.
    assert all(after[path] == t for path, t in before_last.items())
    assert f"{len(before_last)} from the job store" in err.decode()
