"""`vqa serve` against `vqa score`, measured side by side in one run (the machine is shared: a
change of load then hits both alike).

    python scripts/bench/bench_serve.py FOLDER CLIP [--rounds 3] [--latency 40] [--requests 10000]

- throughput: FOLDER through `vqa score FOLDER --output ...` and through a job on a fresh
  server (POST /v1/jobs, then its records streamed to the end), in rounds where each goes
  first in turn. Both
  leave out start-up: the CLI's summary times from a ready Scorer, the service from the POST.
- latency: CLIP uploaded to POST /v1/score, one request at a time, interleaved with
  `Scorer.score(CLIP)` in this process. Added latency = the client's round trip less the
  server's own upload and scoring times (its Server-Timing header).
- memory: REQUESTS uploads against 127.0.0.1 (99 of 100 a 4 kB file that is no video, 1 of 100
  a 64x48 clip), with the server's RSS (and its workers') every 1,000.
Prints one JSON object at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, data: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "vqa.cli", "serve", "--root", str(root), "--data", str(data),
                             "--port", str(port)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit("vqa serve did not start")
        time.sleep(0.1)
    raise SystemExit("vqa serve did not answer /healthz")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def cli_round(folder: Path, work: Path) -> float:
    """Videos per minute of one `vqa score` run, from its summary line (start-up left out)."""
    out = work / f"cli-{time.monotonic_ns()}.jsonl"
    err = subprocess.run([sys.executable, "-m", "vqa.cli", "score", str(folder), "--output", str(out)],
                         capture_output=True, text=True).stderr
    match = re.search(r"(\d+) processed in ([\d.]+) s", err)
    if match is None:
        raise SystemExit(f"no summary from vqa score: {err}")
    return int(match.group(1)) / float(match.group(2)) * 60


def service_round(folder: Path, work: Path) -> float:
    proc, url = start_server(folder, work / f"data-{time.monotonic_ns()}")
    try:
        with httpx.Client(base_url=url, timeout=None) as client:
            started = time.perf_counter()
            job = client.post("/v1/jobs", json={"paths": [str(folder.resolve())]}).json()
            n = 0
            with client.stream("GET", f"/v1/jobs/{job['id']}/records") as records:
                for line in records.iter_lines():
                    n += bool(line)
            elapsed = time.perf_counter() - started
        return n / elapsed * 60
    finally:
        stop_server(proc)


def timing(header: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"(\w+);dur=([\d.]+)", header)}


def latency(clip: Path, work: Path, n: int) -> dict:
    from vqa import Scorer

    proc, url = start_server(clip.parent, work / "data-latency")
    body = clip.read_bytes()
    rows = []
    try:
        with Scorer() as scorer, httpx.Client(base_url=url, timeout=None) as client:
            scorer.score(str(clip))
            client.post("/v1/score", files={"file": (clip.name, body)})  # warm both
            for _ in range(n):
                t = time.perf_counter()
                scorer.score(str(clip))
                direct = time.perf_counter() - t
                t = time.perf_counter()
                r = client.post("/v1/score", files={"file": (clip.name, body)})
                trip = time.perf_counter() - t
                server = timing(r.headers["server-timing"])
                rows.append({"direct_ms": direct * 1e3, "trip_ms": trip * 1e3, **server})
    finally:
        stop_server(proc)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    added = statistics.median(r["trip_ms"] - r["upload"] - r["score"] for r in rows)
    return {"requests": n, "clip_bytes": len(body), "median_ms": med, "added_ms_median": added,
            "trip_less_upload_vs_direct_ms": statistics.median(r["trip_ms"] - r["upload"] for r in rows)
            - med["direct_ms"]}


def memory(clip_bytes: bytes, work: Path, n: int) -> dict:
    root = work / "mem-root"
    root.mkdir()
    proc, url = start_server(root, work / "data-memory")
    noise = os.urandom(4096)
    samples = []
    started = time.perf_counter()
    try:
        with httpx.Client(base_url=url, timeout=None) as client:
            for i in range(n + 1):
                if i % 1000 == 0:
                    samples.append({"requests": i, "server_mib": round(rss_mib(proc.pid), 1),
                                    "workers_mib": round(sum(rss_mib(c) for c in children(proc.pid)), 1)})
                if i == n:
                    break
                body = clip_bytes if i % 100 == 99 else noise
                r = client.post("/v1/score", files={"file": ("m.mp4", body)})
                assert r.status_code == 200, r.text
            assert not os.listdir(work / "data-memory" / "uploads")
    finally:
        stop_server(proc)
    return {"requests": n, "seconds": round(time.perf_counter() - started, 1), "rss": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("clip", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency", type=int, default=40, help="single-upload requests")
    ap.add_argument("--requests", type=int, default=10_000, help="requests of the memory loop")
    ap.add_argument("--small-clip", type=Path, default=None, help="the clip of the memory loop (default CLIP)")
    ap.add_argument("--only", choices=["throughput", "latency", "memory"], action="append",
                    help="run only these parts (repeatable; default: all three)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    result = {"load_average_start": os.getloadavg()}
    parts = set(a.only or ["throughput", "latency", "memory"])
    try:
        cli, service = [], []
        for i in range(a.rounds if "throughput" in parts else 0):
            # Which goes first alternates: a load that rises or falls during a round hits both alike.
            if i % 2 == 0:
                cli.append(cli_round(a.folder, work))
                service.append(service_round(a.folder, work))
            else:
                service.append(service_round(a.folder, work))
                cli.append(cli_round(a.folder, work))
            print(f"throughput: vqa score {cli[-1]:.1f}, vqa serve {service[-1]:.1f} videos/min", file=sys.stderr)
        if cli:
            result["throughput"] = {"videos": sum(1 for p in a.folder.rglob("*") if p.is_file()),
                                    "cli_videos_per_min": cli, "service_videos_per_min": service,
                                    "ratio_of_medians": statistics.median(service) / statistics.median(cli),
                                    "median_ratio_per_round": statistics.median(s / c for s, c in zip(service, cli))}
        if "latency" in parts:
            result["latency"] = latency(a.clip, work, a.latency)
            print(f"latency: {json.dumps(result['latency'])}", file=sys.stderr)
        if "memory" in parts:
            result["memory"] = memory((a.small_clip or a.clip).read_bytes(), work, a.requests)
        result["load_average_end"] = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
