"""A server killed with SIGKILL mid-job, then stopped with SIGTERM mid-job, then started
again: every video ends up in the job exactly once, a video stored before a stop is not
scored again, the videos in flight at SIGTERM are stored, and a queued job carries on."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3

import pytest
from tests.support.engine import wait_until
from tests.support.server import Server, wait_job

pytestmark = pytest.mark.slow

CLIPS = 12


def stored(data) -> dict[bytes, float]:
    with sqlite3.connect(data / "results.vqa.db") as db:
        return dict(db.execute("SELECT path, scored_at FROM results"))


def done(client, job_id) -> int:
    return client.get(f"/v1/jobs/{job_id}", params={"records": "false"}).json()["done"]


def test_sigkill_then_sigterm_mid_job_then_restart(make_clip, tmp_path):
    root = tmp_path / "root"
    (root / "day1").mkdir(parents=True)
    (root / "day2").mkdir()
    for i in range(CLIPS):
        shutil.copy(make_clip("clean"), root / "day1" / f"clip{i:02d}.mp4")
    (root / "day1" / "zz_broken.mp4").write_bytes(os.urandom(5000))
    shutil.copy(make_clip("blur"), root / "day2" / "late.mp4")
    data = tmp_path / "data"
    server = Server(root, data, "--frames", "all").start()
    try:
        with server.client() as client:
            job = client.post("/v1/jobs", json={"paths": [str(root / "day1")]}).json()["id"]
            assert wait_until(lambda: done(client, job) >= 2, 120)
        assert server.kill(signal.SIGKILL) == -signal.SIGKILL
        before_kill = stored(data)
        assert 0 < len(before_kill) < CLIPS, "the kill did not land mid-job"

        server.start()  # the same data folder: the job carries on
        with server.client() as client:
            assert wait_until(lambda: done(client, job) >= len(before_kill) + 2, 120)
            queued = client.post("/v1/jobs", json={"paths": [str(root / "day2")]}).json()["id"]
        assert server.kill(signal.SIGTERM) == 128 + signal.SIGTERM, server.log()
        assert "Traceback" not in server.log()
        before_term = stored(data)
        assert len(before_kill) < len(before_term) < CLIPS + 1, "SIGTERM did not land mid-job"
        with sqlite3.connect(data / "jobs.db") as db:
            listed = db.execute("SELECT COUNT(*) FROM records WHERE job=?", (job,)).fetchone()[0]
        assert listed == len(before_term)  # every video scored before the exit is stored and listed

        server.start()
        with server.client() as client:
            first, second = wait_job(client, job), wait_job(client, queued)
    finally:
        server.stop()
    names = [os.path.basename(r["path"]) for r in first["records"]]
    assert names == sorted(os.listdir(root / "day1"))  # each exactly once, in order
    assert [r["status"] for r in first["records"]] == ["ok"] * CLIPS + ["error"]
    assert [os.path.basename(r["path"]) for r in second["records"]] == ["late.mp4"]
    after = stored(data)
    assert len(after) == CLIPS + 2
    assert all(after[path] == t for path, t in before_term.items())  # nothing stored was scored again
