"""``vqa serve`` as a caller sees it: a real server process on a free port, a real HTTP client.

One server (token, small queues and limits) answers the tests of this module in turn; the
kill-and-restart test runs its own. Clips are 64x48 and score in milliseconds.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
from pathlib import Path

import pytest
from tests.support.malformed_media import good_clip
from tests.support.engine import wait_until
from tests.support.server import Server, multipart, wait_job

pytestmark = pytest.mark.slow  # a server process that scores real clips

TOKEN = "s3cret-token"
UPLOAD_LIMIT_MB = 1
BODY_LIMIT_KB = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    root = base / "root"
    (root / "day1").mkdir(parents=True)
    for i in range(4):
        good_clip(root / "day1", f"clip{i}.mp4", seed=i)
    (root / "day1" / "broken.mp4").write_bytes(os.urandom(3000))
    outside = base / "outside"
    outside.mkdir()
    good_clip(outside, "secret.mp4")
    (root / "link.mp4").symlink_to(outside / "secret.mp4")
    (root / "day1" / "zlink.mp4").symlink_to(outside / "secret.mp4")
    (root / "empty").mkdir()
    (root / "many").mkdir()
    for i in range(120):  # one file under 120 names (a job names each path once)
        os.link(root / "day1" / "clip0.mp4", root / "many" / f"clip{i:03d}.mp4")
    srv = Server(root, base / "data", "--queue-jobs", "1", "--queue-uploads", "1",
                 "--max-upload-mb", str(UPLOAD_LIMIT_MB), "--max-body-kb", str(BODY_LIMIT_KB), token=TOKEN)
    srv.outside = outside
    with srv:
        yield srv


def test_healthz_is_open_and_every_other_route_needs_the_token(server):
    with server.client(token=None) as anonymous, server.client(token="wrong") as wrong, server.client() as ok:
        health = anonymous.get("/healthz")
        assert health.status_code == 200 and health.json()["model_loaded"] and health.json()["workers_alive"] == 1
        for method, route in [("GET", "/metrics"), ("GET", "/v1/jobs"), ("POST", "/v1/jobs"),
                              ("POST", "/v1/score"), ("GET", "/v1/jobs/x/report")]:
            for client in (anonymous, wrong):
                r = client.request(method, route)
                assert r.status_code == 401, (method, route, r.text)
                assert r.json()["error"]["code"] == "E_AUTH" and r.headers["www-authenticate"].startswith("Bearer")
        assert ok.get("/v1/jobs").status_code == 200
        # The docs hold no data, and a browser's page load cannot send a token (vqa.serve.schema).
        assert "swagger" in anonymous.get("/docs").text.lower()
        spec = anonymous.get("/openapi.json").json()
        assert {"/v1/jobs", "/v1/jobs/{job_id}/records", "/v1/score", "/healthz", "/metrics"} <= set(spec["paths"])


def test_a_job_by_path_streams_its_records_then_serves_its_report(server):
    with server.client() as client:
        r = client.post("/v1/jobs", json={"paths": [str(server.root / "day1")]})
        assert r.status_code == 202, r.text
        job_id, total = r.json()["id"], r.json()["total"]
        with client.stream("GET", f"/v1/jobs/{job_id}/records", params={"format": "jsonl"}) as stream:
            records = [json.loads(line) for line in stream.iter_lines() if line]
        names = [os.path.basename(rec["path"]) for rec in records]
        assert names == ["broken.mp4", "clip0.mp4", "clip1.mp4", "clip2.mp4", "clip3.mp4", "zlink.mp4"] and total == 6
        codes = {os.path.basename(rec["path"]): (rec["error"] or {}).get("code") for rec in records}
        assert codes["broken.mp4"] == "E_NOT_VIDEO" and codes["zlink.mp4"] == "E_BAD_PATH"  # a link out of root
        assert all(rec["status"] == "ok" for rec in records[1:5])
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert (job["state"], job["done"], job["ok"], job["failed"]) == ("done", 6, 4, 2)
        assert job["records"] == records and job["errors_by_code"] == {"E_BAD_PATH": 1, "E_NOT_VIDEO": 1}
        as_json = client.get(f"/v1/jobs/{job_id}/records", params={"format": "json"}).json()
        assert as_json == records
        later = client.get(f"/v1/jobs/{job_id}/records", params={"after": 3}).text.splitlines()
        assert [json.loads(line) for line in later] == records[4:]

        page = client.get(f"/v1/jobs/{job_id}/report")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and f'content="{csp}"'.replace("'", "&#x27;") in page.text
        assert "clip3.mp4" in page.text

        assert client.delete(f"/v1/jobs/{job_id}").json() == {"id": job_id, "deleted": True}
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
        assert client.delete(f"/v1/jobs/{job_id}").json()["error"]["code"] == "E_NO_JOB"


@pytest.mark.parametrize("path", ["outside", "link.mp4", "day1/../../outside/secret.mp4", "/etc/passwd", "/"])
def test_a_path_outside_the_roots_is_refused(server, path):
    named = str(server.outside) if path == "outside" else path
    with server.client() as client:
        r = client.post("/v1/jobs", json={"paths": [str(server.root / "day1" / "clip0.mp4"), named]})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "E_BAD_PATH"
        assert not any(job["total"] for job in client.get("/v1/jobs").json()["jobs"] if job["state"] != "done")


def test_bad_bodies_get_400_and_large_ones_413(server):
    with server.client() as client:
        assert client.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
                           ).json()["error"]["code"] == "E_USAGE"
        assert client.post("/v1/jobs", json={"paths": []}).status_code == 400
        empty = client.post("/v1/jobs", json={"paths": [str(server.root / "empty")]})
        assert empty.status_code == 400 and "no video files" in empty.json()["error"]["message"]
        big = client.post("/v1/jobs", json={"paths": ["x" * (BODY_LIMIT_KB << 10)]})
        assert big.status_code == 413 and big.json()["error"]["code"] == "E_TOO_LARGE"
        none = client.post("/v1/score", files={"note": (None, b"text, no file")})
        assert none.status_code == 400 and "no file" in none.json()["error"]["message"]
        # Streamed with no length given: cut off once past the limit.
        chunks = (b"\0" * 65536 for _ in range(UPLOAD_LIMIT_MB * 16 + 4))
        r = client.post("/v1/score", content=chunks, params={"name": "big.mp4"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "E_TOO_LARGE"
    # A declared length over the limit is refused from the headers, before any byte of the body.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                  + b"\r\nContent-Type: application/octet-stream\r\nContent-Length: 10000000000\r\n\r\n")
        head = s.recv(65536).decode()
    assert head.startswith("HTTP/1.1 413"), head
    assert not list((server.data / "uploads").iterdir())  # nothing left behind


def test_single_uploads_are_scored_and_deleted(server, tmp_path):
    clip = good_clip(tmp_path, "mine.mp4")
    with server.client() as client:
        r = client.post("/v1/score", files=multipart([clip]))
        assert r.status_code == 200, r.text
        assert r.json()["path"] == "mine.mp4" and r.json()["status"] == "ok"
        assert re.search(r"upload;dur=[\d.]+, score;dur=[\d.]+, total;dur=[\d.]+", r.headers["server-timing"])
        raw = client.post("/v1/score", content=Path(clip).read_bytes(), params={"name": "../../raw name.mp4"})
        assert raw.json()["path"] == "raw name.mp4" and raw.json()["score"] == r.json()["score"]
        noise = client.post("/v1/score", files={"file": ("noise.mp4", os.urandom(5000))}).json()
        assert noise["error"]["code"] == "E_NOT_VIDEO" and str(server.data) not in noise["error"]["message"]
    assert not list((server.data / "uploads").iterdir())


def test_a_job_by_upload(server, tmp_path):
    clips = [good_clip(tmp_path, f"up{i}.mp4", seed=i) for i in range(3)]
    (tmp_path / "bad.mkv").write_bytes(b"\x1a\x45\xdf\xa3" + os.urandom(2000))
    with server.client() as client:
        r = client.post("/v1/jobs", files=multipart([*clips, tmp_path / "bad.mkv"]))
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
    assert [rec["path"] for rec in job["records"]] == ["up0.mp4", "up1.mp4", "up2.mp4", "bad.mkv"]
    assert [rec["status"] for rec in job["records"]] == ["ok", "ok", "ok", "error"]
    assert not list((server.data / "uploads").iterdir())  # deleted once scored


def test_past_the_queue_the_server_answers_429_with_retry_after(server, tmp_path):
    with server.client() as client:
        first = client.post("/v1/jobs", json={"paths": [str(server.root / "many")]})  # 120 videos
        assert first.status_code == 202, first.text
        second = client.post("/v1/jobs", json={"paths": [str(server.root / "day1" / "clip0.mp4")]})
        assert second.status_code == 429 and second.json()["error"]["code"] == "E_BUSY"
        assert int(second.headers["retry-after"]) >= 1
        # A burst of uploads, one place: the first holds it while it is scored, the rest are told to wait.
        clip = Path(good_clip(tmp_path, "burst.mp4")).read_bytes()
        answers, barrier = [], threading.Barrier(6)

        def upload():
            with server.client() as c:
                barrier.wait()
                answers.append(c.post("/v1/score", files={"file": ("burst.mp4", clip)}))
        threads = [threading.Thread(target=upload) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = sorted(a.status_code for a in answers)
        assert 200 in statuses and 429 in statuses, statuses
        assert all(int(a.headers["retry-after"]) >= 1 for a in answers if a.status_code == 429)
        # A reader that does not read holds up neither the job nor the other clients.
        job_url = f"/v1/jobs/{first.json()['id']}"
        with client.stream("GET", job_url + "/records") as slow:
            assert wait_until(lambda: client.get(job_url, params={"records": "false"}).json()["state"] == "done", 300)
            assert sum(1 for line in slow.iter_lines() if line) == 120
        assert client.post("/v1/jobs", json={"paths": [str(server.root / "day1" / "clip0.mp4")]}).status_code == 202
        metrics = client.get("/metrics").text
    assert re.search(r'^vqa_videos_total\{source="job",status="ok"\} \d+$', metrics, re.M)
    assert re.search(r'^vqa_errors_total\{code="E_NOT_VIDEO"\} \d+$', metrics, re.M)
    assert re.search(r'^vqa_http_requests_total\{route="/v1/score",status="429"\} [1-9]', metrics, re.M)
    assert "vqa_queue_jobs " in metrics and "vqa_video_seconds_count " in metrics


def test_health_names_nvdec_workers_beside_the_cpu_ones():
    """With --nvdec-workers the pool holds more processes than ``workers``: health says how many
    of them are NVDEC's, and every one of them must be alive for ok."""
    from types import SimpleNamespace

    from vqa.scorer.local import Scorer

    health = Scorer.health  # the Scorer's own probe, on a stand-in with the parts it reads
    me = os.getpid()
    engine = SimpleNamespace(broken=None, pool=SimpleNamespace(pids=[me, me, me]))
    scorer = SimpleNamespace(_engine=engine, inferencer=object(), workers=2, _closed=False,
                             resolved=SimpleNamespace(nvdec_workers=1))
    got = health(scorer)
    assert got["ok"] and (got["workers"], got["nvdec_workers"], got["workers_alive"]) == (2, 1, 3)
    engine.pool.pids = [me, me, 2 ** 22 + 7]  # no such process
    assert not health(scorer)["ok"]
    scorer.resolved.nvdec_workers = 0
    assert "nvdec_workers" not in health(scorer)
