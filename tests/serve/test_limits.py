"""``vqa serve``'s limits against a real server: a body that stops arriving (408, its place
given back), a job that names too much or the same thing many times, and what a stop does to
the port."""
from __future__ import annotations

import json
import signal
import socket
import time

import pytest
from tests.support.malformed_media import good_clip
from tests.support.engine import wait_until
from tests.support.server import Server, error, wait_job

pytestmark = pytest.mark.slow

TOKEN = "t0ken"
MAX_INPUTS = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-limits")
    root = base / "root"
    (root / "day").mkdir(parents=True)
    (root / "many").mkdir()
    for i in range(3):
        good_clip(root / "day", f"clip{i}.mp4", seed=i)
    for i in range(MAX_INPUTS + 1):
        (root / "many" / f"x{i}.mp4").write_bytes(b"not a video")
    srv = Server(root, base / "data", "--queue-uploads", "1", "--body-timeout", "1", "--max-inputs", str(MAX_INPUTS),
                 token=TOKEN)
    srv.clip = (root / "day" / "clip0.mp4").read_bytes()
    with srv:
        yield srv


def stalled(server, head: bytes) -> socket.socket:
    """A client that sends ``head``, one chunk of its body, then nothing."""
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(15)
    s.sendall(head + b"Authorization: Bearer " + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
              + b"400\r\n" + b"\0" * 1024 + b"\r\n")
    return s


def uploads_in_flight(server) -> int:
    """The server's own count of single uploads holding a place (its /metrics)."""
    with server.client() as client:
        text = client.get("/metrics").text
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("vqa_uploads_in_flight")))


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def answer(s: socket.socket) -> tuple[str, dict]:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        more = s.recv(65536)
        if not more:
            break
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode().split("\r\n")[0], json.loads(body[body.index(b"{"):body.rindex(b"}") + 1])


def test_a_body_that_stops_arriving_gets_408_and_gives_its_place_back(server):
    started = time.monotonic()
    with stalled(server, b"POST /v1/score?name=slow.mp4 HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/octet-stream\r\n") as s, server.client() as client:
        assert wait_until(lambda: uploads_in_flight(server) == 1, 10)  # the stalled upload holds its place
        error(client.post("/v1/score", files={"file": ("c.mp4", server.clip)}), 429, "E_BUSY")  # its one place
        status, body = answer(s)
        assert status.startswith("HTTP/1.1 408") and body["error"]["code"] == "E_SLOW_BODY", (status, body)
        assert time.monotonic() - started < 10
        assert client.post("/v1/score", files={"file": ("c.mp4", server.clip)}).status_code == 200
    assert not list((server.data / "uploads").iterdir())  # the partial file is gone
    with stalled(server, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n") as s:
        status, body = answer(s)
    assert status.startswith("HTTP/1.1 408") and body["error"]["code"] == "E_SLOW_BODY", (status, body)


def test_a_job_names_each_video_once_and_at_most_max_inputs(server):
    with server.client() as client:
        jobs = len(client.get("/v1/jobs").json()["jobs"])
        r = client.post("/v1/jobs", json={"paths": ["day"] * 5000 + ["./day/", "day/clip1.mp4"]})
        assert r.status_code == 202 and r.json()["total"] == 3, r.text
        wait_job(client, r.json()["id"])
        message = error(client.post("/v1/jobs", json={"paths": ["many"]}), 413, "E_TOO_LARGE")
        assert f"--max-inputs {MAX_INPUTS}" in message
        assert len(client.get("/v1/jobs").json()["jobs"]) == jobs + 1  # nothing stored for the refused one


def test_after_sigterm_the_port_closes_and_a_stalled_upload_hears_503_at_once(tmp_path):
    """What the README says of a stop: the port closes at once (new connections are refused),
    and an upload still arriving is answered 503 (retry later) at once, without a traceback in
    the log. Before: it waited the whole drain timeout, then got a bare 500, and the log a
    CancelledError traceback."""
    (tmp_path / "root").mkdir()
    server = Server(tmp_path / "root", tmp_path / "data", "--body-timeout", "60", "--drain-timeout", "5").start()
    try:
        with stalled(server, b"POST /v1/score?name=a.mp4 HTTP/1.1\r\nHost: 127.0.0.1\r\n") as s:
            assert wait_until(lambda: uploads_in_flight(server) == 1, 10)  # the request is in progress
            server.proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            assert wait_until(lambda: refuses_connections(server.port), 5), "the port stayed open after SIGTERM"
            status, body = answer(s)
            waited_s = time.monotonic() - stopped
        assert status.startswith("HTTP/1.1 503") and body["error"]["code"] == "E_BUSY", (status, body)
        assert waited_s < 3, waited_s  # not the drain timeout
        assert server.proc.wait(60) == 128 + signal.SIGTERM
        assert "Traceback" not in server.log() and "CancelledError" not in server.log(), server.log()
    finally:
        server.stop()
