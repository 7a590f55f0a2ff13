"""``vqa serve`` under idle sockets and a burst of reports, against a real server with the usual
1,024 open files: /healthz keeps answering, reports are bounded (429 past the pool), idle and
half-sent connections are closed, and the log stays small.

The measured /healthz latency is printed (``pytest -s``) and written to
``$VQA_SERVE_LOAD_OUT`` when set."""
from __future__ import annotations

import json
import os
import resource
import socket
import statistics
import threading
import time

import httpx
import pytest
from tests.support.malformed_media import good_clip
from tests.support.server import Server, wait_job

pytestmark = pytest.mark.slow

IDLE = 1000
REPORTS = 40
PROBES = 30
CLIPS = 6


def test_idle_sockets_and_a_report_burst_do_not_starve_the_probe(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    for i in range(CLIPS):
        good_clip(root, f"clip{i}.mp4", seed=i)
    limits = {resource.RLIMIT_NOFILE: (1024, 1024)}
    with Server(root, tmp_path / "data", "--header-timeout", "60", "--report-workers", "2", limits=limits) as srv:
        with srv.client() as client:
            job = client.post("/v1/jobs", json={"paths": ["."]}).json()["id"]
            assert wait_job(client, job)["ok"] == CLIPS
        idle = []
        try:
            for _ in range(IDLE):  # connect and send nothing
                idle.append(socket.create_connection(("127.0.0.1", srv.port), timeout=10))
            statuses: list[int] = []

            def report() -> None:
                try:
                    r = httpx.get(f"{srv.url}/v1/jobs/{job}/report", params={"thumbnails": CLIPS}, timeout=120)
                    statuses.append(r.status_code)
                    assert r.status_code == 200 or r.headers["retry-after"]
                except httpx.HTTPError as e:
                    statuses.append(type(e).__name__)  # type: ignore[arg-type]

            burst = [threading.Thread(target=report) for _ in range(REPORTS)]
            for t in burst:
                t.start()
            latencies_ms = []
            for _ in range(PROBES):  # as a load balancer probes: a new connection each time
                started = time.perf_counter()
                r = httpx.get(f"{srv.url}/healthz", timeout=10)
                latencies_ms.append((time.perf_counter() - started) * 1e3)
                assert r.status_code == 200, r.text
            for t in burst:
                t.join(180)
        finally:
            for s in idle:
                s.close()
        log_bytes = len(srv.log())
    result = {"idle_connections": IDLE, "report_requests": REPORTS, "probes": PROBES,
              "healthz_median_ms": round(statistics.median(latencies_ms), 1),
              "healthz_worst_ms": round(max(latencies_ms), 1),
              "reports_200": statuses.count(200), "reports_429": statuses.count(429), "log_bytes": log_bytes}
    print(json.dumps(result))
    if os.environ.get("VQA_SERVE_LOAD_OUT"):
        with open(os.environ["VQA_SERVE_LOAD_OUT"], "a") as f:
            f.write(json.dumps(result) + "\n")
    assert sorted(set(statuses)) <= [200, 429] and statuses.count(200) >= 2, statuses
    assert max(latencies_ms) < 3000, result
    assert log_bytes < 100_000, result  # before: EMFILE logged over and over, 70 MB in 8 s


def test_a_connection_that_sends_nothing_or_half_a_request_is_closed(tmp_path):
    (tmp_path / "root").mkdir()
    with Server(tmp_path / "root", tmp_path / "data", "--header-timeout", "1") as srv:
        silent = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
        half = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
        half.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        with silent, half:
            assert silent.recv(1024) == b"" and half.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 10
