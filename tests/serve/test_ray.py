"""``vqa serve --engine ray``: the server is a Ray driver on a local two-node cluster (as
tests/test_ray.py makes it); an actor killed mid-job costs nothing, every video gets one
record; and a job's throughput through Ray against the local engine, printed (``pytest -s``)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.engine import wait_until
from tests.support.required import optional_module
from tests.support.server import REPO, Server, wait_job

pytestmark = pytest.mark.slow

CLIPS = 12


@pytest.fixture(scope="module")
def cluster():
    ray = optional_module("ray", "the [ray] extra")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-ray") / "root"
    folder.mkdir()
    for i in range(CLIPS):
        write_clip(folder / f"clip{i:02d}.mp4", textured_frames(25, 96, 160, seed=i))
    return folder


def actor_pids() -> list[int]:
    """The processes of the vqa actors (Ray titles them ``ray::NodeScorer...``)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::NodeScorer"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def timed_job(srv: Server) -> tuple[float, list[dict]]:
    with srv.client() as client:
        started = time.perf_counter()
        job = client.post("/v1/jobs", json={"paths": ["."]}).json()["id"]
        done = wait_job(client, job)
        seconds = time.perf_counter() - started
        assert done["ok"] == CLIPS, done
        return seconds, client.get(f"/v1/jobs/{job}").json()["records"]


def test_a_ray_server_scores_each_video_once_through_an_actor_killed_mid_job(cluster, root, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the actors import this checkout's vqa
    with Server(root, tmp_path / "local") as local:
        local_s, expected = timed_job(local)
    with Server(root, tmp_path / "ray", "--engine", "ray") as srv, srv.client() as client:
        assert wait_until(lambda: client.get("/healthz").json().get("actors") == 2, 120, poll_s=0.2)
        ray_s, got = timed_job(srv)  # warm: every actor has its model
        assert [{k: v for k, v in r.items() if k != "timing"} for r in got] == \
            [{k: v for k, v in r.items() if k != "timing"} for r in expected]
        job = client.post("/v1/jobs", json={"paths": ["."]}).json()["id"]
        victim = None
        with client.stream("GET", f"/v1/jobs/{job}/records") as stream:
            for n, _line in enumerate(stream.iter_lines(), 1):
                if n == 2 and victim is None:
                    victim = actor_pids()[0]
                    os.kill(victim, signal.SIGKILL)
        records = client.get(f"/v1/jobs/{job}").json()
        assert victim is not None and (records["done"], records["ok"]) == (CLIPS, CLIPS), records
        assert [os.path.basename(r["path"]) for r in records["records"]] == sorted(os.listdir(root))
        log = srv.log()
    result = {"clips": CLIPS, "local_s": round(local_s, 2), "ray_s": round(ray_s, 2),
              "ray_over_local": round(ray_s / local_s, 2)}
    print(json.dumps(result))
    if os.environ.get("VQA_SERVE_LOAD_OUT"):
        with open(os.environ["VQA_SERVE_LOAD_OUT"], "a") as f:
            f.write(json.dumps(result) + "\n")
    assert "engine=ray" in log and "Traceback" not in log, log


def test_a_ray_server_killed_mid_job_carries_on_after_a_restart_each_video_once(cluster, root, tmp_path,
                                                                                monkeypatch):
    import sqlite3

    def stored() -> dict[bytes, float]:
        with sqlite3.connect(tmp_path / "data" / "results.vqa.db") as db:
            return dict(db.execute("SELECT path, scored_at FROM results"))

    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    server = Server(root, tmp_path / "data", "--engine", "ray", "--frames", "all").start()
    try:
        with server.client() as client:
            job = client.post("/v1/jobs", json={"paths": ["."]}).json()["id"]
            assert wait_until(lambda: client.get(f"/v1/jobs/{job}", params={"records": "false"}).json()["done"]
                              >= 2, 180, poll_s=0.1)
        assert server.kill(signal.SIGKILL) == -signal.SIGKILL
        before = stored()
        assert 0 < len(before) < CLIPS, "the kill did not land mid-job"
        server.start()  # the same data folder: the job carries on, on new actors
        with server.client() as client:
            records = wait_job(client, job)["records"]
    finally:
        server.stop()
    assert [os.path.basename(r["path"]) for r in records] == sorted(os.listdir(root))  # each exactly once
    assert all(r["status"] == "ok" for r in records)
    after = stored()
    assert len(after) == CLIPS and all(after[p] == t for p, t in before.items())  # none scored twice
