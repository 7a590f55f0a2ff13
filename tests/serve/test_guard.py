"""``vqa serve`` as an operator runs it on a laptop, without a token: what a web page in the
user's browser and a DNS-rebound name can do to it (nothing), what every answer carries, how
its files are kept, and what its log says. A real server on 127.0.0.1, a real HTTP client."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
from datetime import datetime

import pytest
from tests.support.malformed_media import good_clip
from tests.support.server import Server, error, wait_job

pytestmark = pytest.mark.slow

ALLOWED = "vqa.example.lan"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-guard")
    root = base / "root"
    (root / "day").mkdir(parents=True)
    good_clip(root / "day", "clip0.mp4")
    data = base / "data"
    data.mkdir(mode=0o755)  # as a service manager or a volume makes it
    os.chmod(data, 0o755)
    srv = Server(root, data, "--allow-host", ALLOWED, "--report-workers", "1")
    with srv:
        yield srv


def test_a_rebound_name_and_a_cross_site_page_are_refused_without_a_token(server):
    with server.client(token=None) as client:
        jobs = len(client.get("/v1/jobs").json()["jobs"])
        for host in ("rebind.evil.example", "rebind.evil.example:%d" % server.port, "192.168.1.10"):
            message = error(client.get("/v1/jobs", headers={"Host": host}), 403, "E_ORIGIN")
            assert "--allow-host" in message
        # A page elsewhere posting a "simple" request (no preflight): text/plain, and a form.
        evil = {"Origin": "http://evil.example"}
        body = json.dumps({"paths": ["day"]})
        error(client.post("/v1/jobs", content=body, headers={**evil, "Content-Type": "text/plain"}), 403, "E_ORIGIN")
        error(client.post("/v1/score", files={"file": ("a.mp4", b"x")}, headers=evil), 403, "E_ORIGIN")
        error(client.post("/v1/jobs", content=body, headers={"Origin": "null"}), 403, "E_ORIGIN")
        assert len(client.get("/v1/jobs").json()["jobs"]) == jobs  # nothing was queued
        for host in ("localhost", f"localhost:{server.port}", "127.0.0.1", "[::1]:80", ALLOWED, f"{ALLOWED}:8750"):
            assert client.get("/v1/jobs", headers={"Host": host}).status_code == 200, host
        own = {"Origin": f"http://localhost:{server.port}"}
        assert client.get("/v1/jobs", headers=own).status_code == 200
        assert client.get("/healthz", headers={"Host": "127.0.0.1"}).status_code == 200


def test_unknown_json_fields_are_refused_by_name(server):
    with server.client() as client:
        message = error(client.post("/v1/jobs", json={"paths": ["day"], "globs": ["*.mp4"]}), 400, "E_USAGE")
        assert "globs" in message and "glob" in message
        message = error(client.post("/v1/jobs", json={"paths": ["day"], "workers": 10 ** 9, "x": 1}), 400, "E_USAGE")
        assert "workers" in message and "x" in message


def test_a_job_has_a_location_iso_times_and_its_data_is_not_cached(server):
    with server.client() as client:
        r = client.post("/v1/jobs", json={"paths": ["day"]})
        assert r.status_code == 202 and r.headers["location"] == f"/v1/jobs/{r.json()['id']}"
        job = wait_job(client, r.json()["id"])
        for key in ("created", "finished"):
            assert job[key].endswith("Z") and datetime.fromisoformat(job[key].replace("Z", "+00:00")), job
        follow = client.get(r.headers["location"])
        assert follow.status_code == 200 and follow.json()["id"] == job["id"]
        for route in ("/v1/jobs", r.headers["location"], r.headers["location"] + "/records",
                      r.headers["location"] + "/report", "/metrics"):
            assert client.get(route).headers.get("cache-control") == "no-store", route


def test_head_answers_every_get_route_without_a_body(server):
    with server.client() as client:
        job = client.post("/v1/jobs", json={"paths": ["day"]}).json()["id"]
        wait_job(client, job)
        routes = [path.replace("{job_id}", job) for path, ops in client.get("/openapi.json").json()["paths"].items()
                  if "get" in ops] + ["/openapi.json", "/docs", "/redoc"]
        assert len(routes) >= 9, routes
        for route in routes:
            got, head = client.get(route), client.head(route)
            assert head.status_code == got.status_code == 200, (route, head.status_code)
            assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"], route


def test_a_request_with_both_lengths_is_refused_and_its_connection_closed(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                  b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):  # ends when the server closes the connection
            data += chunk
    assert data.startswith(b"HTTP/1.1 400") and b"E_USAGE" in data
    assert data.count(b"HTTP/1.1") == 1  # the smuggled second request was never answered


def test_files_are_private_in_a_data_folder_that_is_not(server):
    with server.client() as client:
        wait_job(client, client.post("/v1/jobs", json={"paths": ["day"]}).json()["id"])
    found = []
    for folder, dirs, files in os.walk(server.data):
        for name in dirs:
            found.append((name, stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode), 0o700))
        for name in files:
            found.append((name, stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode), 0o600))
    assert any(name == "results.vqa.db" for name, _m, _w in found)
    assert [(n, oct(m)) for n, m, want in found if m != want] == []


def test_a_report_opens_a_scored_file_only_through_the_folder_check(server):
    """A file swapped, after scoring, for a link to a copy outside --root: the report's
    thumbnail is refused (E_BAD_PATH), not read from outside. Before: the thumbnail was made
    from the file outside."""
    clip = server.root / "swap" / "clip.mp4"
    clip.parent.mkdir()
    good_clip(clip.parent, "clip.mp4", seed=3)
    outside = server.data.parent / "outside-copy.mp4"
    with server.client() as client:
        job = client.post("/v1/jobs", json={"paths": ["swap"]}).json()["id"]
        assert wait_job(client, job)["ok"] == 1
        shutil.copyfile(clip, outside)  # the same bytes: the fingerprint check alone would pass it
        clip.unlink()
        clip.symlink_to(outside)
        page = client.get(f"/v1/jobs/{job}/report", params={"thumbnails": 1})
    assert page.status_code == 200
    assert "data:image/jpeg" not in page.text and "E_BAD_PATH" in page.text


def test_the_log_says_ready_each_answer_and_each_job_and_never_the_token(tmp_path):
    (tmp_path / "root").mkdir()
    good_clip(tmp_path / "root", "clip0.mp4")
    token = "log-s3cret"
    with Server(tmp_path / "root", tmp_path / "data", "--log-format", "json", token=token) as srv:
        with srv.client() as client:
            r = client.post("/v1/jobs?x=1", json={"paths": ["clip0.mp4"]})
            wait_job(client, r.json()["id"])
            client.post("/v1/score", params={"name": "upload.mp4"}, content=b"UPLOAD-BYTES-" * 100)
        assert srv.kill(signal.SIGTERM) == 128 + signal.SIGTERM
        lines = [json.loads(line) for line in srv.log().splitlines() if line.strip()]
    events = [e["event"] for e in lines]
    ready = lines[events.index("ready")]
    assert ready["url"] == srv.url and ready["workers"] == 1 and ready["backend"] and ready["model"] != "?"
    jobs = [(e["state"], e.get("total"), e.get("ok")) for e in lines if e["event"] == "job"]
    assert jobs == [("submitted", 1, None), ("started", 1, None), ("finished", 1, 1)]
    assert any(e["event"] == "job" and e["state"] == "finished" and e["seconds"] >= 0 for e in lines)
    access = [(e["method"], e["path"], e["status"]) for e in lines if e["event"] == "access"]
    assert ("POST", "/v1/jobs", 202) in access and ("POST", "/v1/score", 200) in access
    # The server may write the last answer's access line after "stopping" (the client has the
    # answer before the server logs it, and the signal comes right after), never after "stopped".
    assert events[-1] == "stopped" and events.count("stopping") == 1
    assert set(events[events.index("stopping") + 1:-1]) <= {"access"}
    text = srv_log = "\n".join(json.dumps(e) for e in lines)
    assert token not in srv_log and "UPLOAD-BYTES" not in text


def test_a_stopped_server_leaves_jobs_db_a_complete_backup(tmp_path):
    (tmp_path / "root").mkdir()
    good_clip(tmp_path / "root", "clip0.mp4")
    with Server(tmp_path / "root", tmp_path / "data") as srv:
        with srv.client() as client:
            job = client.post("/v1/jobs", json={"paths": ["clip0.mp4"]}).json()["id"]
            wait_job(client, job)
        srv.kill(signal.SIGTERM)
    backup = tmp_path / "backup.db"
    shutil.copyfile(tmp_path / "data" / "jobs.db", backup)  # the one file, without -wal or -shm
    with sqlite3.connect(backup) as db:
        assert db.execute("SELECT id, state FROM jobs").fetchall() == [(job, "done")]
        assert db.execute("SELECT COUNT(*) FROM records").fetchone() == (1,)
