"""A real ``vqa serve`` process on a free port of 127.0.0.1, for tests that call it with a
real HTTP client (httpx), kill it and start it again on the same data folder."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
from tests.support.engine import wait_until

REPO = Path(__file__).resolve().parents[2]
START_S = 120  # model load and worker start on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``vqa serve`` with ``args``; ``start()`` returns once /healthz answers 200."""

    def __init__(self, root: Path, data: Path, *args: str, token: str | None = None,
                 limits: dict[int, tuple[int, int]] | None = None):
        """``limits``: resource limits of the server process (``resource.RLIMIT_*`` -> (soft, hard))."""
        self.root, self.data, self.args, self.token, self.limits = root, data, list(args), token, limits or {}
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: str | None = "default", **kw) -> httpx.Client:
        token = self.token if token == "default" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kw.pop("timeout", 120), **kw)

    def start(self) -> Server:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("VQA_SERVE_TOKEN", None)
        if self.token:
            env["VQA_SERVE_TOKEN"] = self.token
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vqa.cli", "serve", "--root", str(self.root), "--data", str(self.data),
             "--port", str(self.port), "--workers", "1", "--threads", "1", *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=str(self.data.parent),
            preexec_fn=self._limit if self.limits else None)
        if not wait_until(lambda: self.proc.poll() is not None or self._healthy(), START_S, poll_s=0.1) \
                or self.proc.poll() is not None:
            raise AssertionError(f"vqa serve did not start (status {self.proc.poll()}):\n{self.log()}")
        return self

    def _limit(self) -> None:
        import resource
        for which, pair in self.limits.items():
            resource.setrlimit(which, pair)

    def __enter__(self) -> Server:
        """Started; stopped on the way out, also when it failed to start."""
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def kill(self, sig: int = signal.SIGKILL, timeout_s: float = 120) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill(signal.SIGTERM)
        if self._log is not None:
            self._log.close()
            self._log = None


def wait_job(client: httpx.Client, job_id: str, timeout_s: float = 300) -> dict:
    """The job once it is done (its records streamed to the end, then its state read)."""
    with client.stream("GET", f"/v1/jobs/{job_id}/records", params={"format": "jsonl"}, timeout=timeout_s) as r:
        assert r.status_code == 200, r.read()
        for _line in r.iter_lines():
            pass
    return client.get(f"/v1/jobs/{job_id}").json()


def multipart(paths) -> list[tuple[str, tuple[str, bytes]]]:
    return [("file", (os.path.basename(os.fsdecode(p)), Path(os.fsdecode(p)).read_bytes())) for p in paths]


def error(r: httpx.Response, status: int, code: str) -> str:
    """The message of an answer that must be ``status`` with the error body ``code``."""
    assert r.status_code == status, (r.request.url, r.status_code, r.text)
    assert set(r.json()) == {"error"} and r.json()["error"]["code"] == code, r.text
    return r.json()["error"]["message"]
