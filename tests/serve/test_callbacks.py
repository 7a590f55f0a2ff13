"""A job's ``callback_url``, against a real server and a real receiver on 127.0.0.1: called once
the job is done, signed with HMAC-SHA256 over the body, retried after a failed answer, and only
to hosts the operator allowed (a loopback or link-local address only when named itself)."""
from __future__ import annotations

import hmac
import http.server
import json
import socket
import threading
from hashlib import sha256

import pytest
from tests.support.engine import wait_until
from tests.support.malformed_media import good_clip
from tests.support.server import Server, error, free_port

from vqa.serve.callbacks import CallbackRule

pytestmark = pytest.mark.slow

SECRET = "callback-k3y"


class Receiver(http.server.ThreadingHTTPServer):
    """Answers 503 to the first call, 200 after; keeps each call's headers and body."""

    def __init__(self, port: int):
        self.calls: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(503 if len(receiver.calls) == 1 else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", port), Handler)


@pytest.fixture
def receiver():
    server = Receiver(free_port())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_done_job_calls_back_signed_and_retried_to_allowed_hosts_only(tmp_path, receiver):
    (tmp_path / "root").mkdir()
    good_clip(tmp_path / "root", "clip0.mp4")
    port = receiver.server_address[1]
    hook = f"http://127.0.0.1:{port}/hook"
    with Server(tmp_path / "root", tmp_path / "data", "--callback-host", f"127.0.0.1:{port}",
                "--callback-secret", SECRET) as srv, srv.client() as client:
        for refused in (f"http://localhost:{port}/hook", "http://169.254.169.254/latest", "http://example.com/x",
                        f"ftp://127.0.0.1:{port}/", f"http://user:pw@127.0.0.1:{port}/"):
            error(client.post("/v1/jobs", json={"paths": ["clip0.mp4"], "callback_url": refused}), 400, "E_USAGE")
        assert client.get("/v1/jobs").json()["jobs"] == []  # nothing queued for them
        job = client.post("/v1/jobs", json={"paths": ["clip0.mp4"], "callback_url": hook}).json()["id"]
        assert wait_until(lambda: len(receiver.calls) >= 2, 60, poll_s=0.1), (receiver.calls, srv.log())
        assert SECRET not in srv.log()
    assert len(receiver.calls) == 2  # one failed answer, one retry, then no more
    for headers, body in receiver.calls:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, sha256).hexdigest()
        assert hmac.compare_digest(headers["x-vqa-signature"], expected)
        sent = json.loads(body)
        assert (sent["id"], sent["state"], sent["ok"], sent["total"]) == (job, "done", 1, 1)
        assert sent["finished"].endswith("Z") and sent["sent"].endswith("Z")


def test_a_server_without_a_secret_takes_no_callback(tmp_path):
    rule = CallbackRule(["hooks.example"], None)
    with pytest.raises(Exception, match="no callback secret"):
        rule.check("https://hooks.example/x")


def test_an_allowed_name_that_resolves_inside_is_not_called(monkeypatch):
    rule = CallbackRule(["hooks.example", "10.1.2.3"], "k")
    assert rule.check("https://hooks.example/x")
    for inside in ("127.0.0.1", "169.254.169.254", "::1", "0.0.0.0"):
        monkeypatch.setattr(socket, "getaddrinfo", lambda *a, _ip=inside, **k: [(0, 0, 0, "", (_ip, 443))])
        assert not rule.addresses_allowed("hooks.example", 443), inside
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(0, 0, 0, "", ("93.184.216.34", 443))])
    assert rule.addresses_allowed("hooks.example", 443)
