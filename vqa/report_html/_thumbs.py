"""Thumbnails for a report, taken at report time through the hardened decoder.

Frames are read with ``vqa.decode.open_video`` (the same checks at open, format and protocol
whitelists, pixel and aspect caps, decode budget as scoring) in one spawned helper process
that runs under an address-space limit, and is killed and replaced when one video takes
longer than ``timeout_s``. A video that no longer opens, changed since it was scored, or
overran a limit gets a placeholder with the reason, never a failed report.
"""
from __future__ import annotations

import base64
import multiprocessing as mp
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import SpawnProcess

from vqa.codes import ErrorCode

THUMB_MAX_SIDE = 192  # px: the longest side of a thumbnail
JPEG_QUALITY = 75  # about 6 kB for a 192x108 thumbnail
MAX_SEGMENT_THUMBS = 8  # per video, besides the worst frame: the longest segments first
TIMEOUT_S = 60.0  # one video's thumbnails; a sampled read with its decode budget, not a full decode
MEMORY_MB = 4096  # the helper's address space, as a decode worker's default


@dataclass
class Shot:
    """One thumbnail asked for: ``kind`` is "worst" or a defect type, at ``t_s`` seconds."""

    kind: str
    t_s: float
    label: str
    src: str | None = None  # a data: URI when taken
    problem: str | None = None  # why there is none


@dataclass
class Request:
    path: str
    decoder: str
    fingerprint: str
    shots: list[Shot] = field(default_factory=list)


def plan_shots(row: Mapping[str, Any], *, max_segments: int = MAX_SEGMENT_THUMBS) -> list[Shot]:
    """The worst-scoring frame (from the timeline) and the middle of each defect segment,
    the longest segments first when there are more than ``max_segments``."""
    shots = []
    worst = (row.get("timeline") or {}).get("worst")
    if worst:
        shots.append(Shot("worst", worst["t_s"], f"worst frame, score {worst['score']:.1f}"))
    segments = sorted(row["defects"], key=lambda d: d["start_s"] - d["end_s"])[:max_segments]
    for d in sorted(segments, key=lambda d: d["start_s"]):
        mid = (d["start_s"] + d["end_s"]) / 2
        shots.append(Shot(d["type"], mid, f"{d['type']} {d['severity']:.2f}, "
                                          f"{d['start_s']:g}\u2013{d['end_s']:g} s"))
    return shots


def _limit_memory(memory_mb: int | None) -> None:
    if not memory_mb:
        return
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = memory_mb << 20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def take(path: str, decoder: str, fingerprint: str, times: list[float]) -> tuple[dict[float, bytes], str | None]:
    """JPEG bytes of the first frame at or after each time, by time, read in one sampled pass;
    and a problem that applies to every missing one (or None)."""
    import cv2

    from vqa.decode import open_video
    from vqa.errors import VQAError
    from vqa.types import Run, SamplePlan

    wanted = sorted(set(times))
    try:
        with open_video(path, backend=decoder, threads=1) as reader:
            if fingerprint and reader.info.fingerprint != fingerprint:
                return {}, "the file changed since it was scored"
            end = max(reader.info.duration_s, wanted[-1]) + 1.0
            runs = tuple(Run(t, 1, t, wanted[k + 1] if k + 1 < len(wanted) else end) for k, t in enumerate(wanted))
            out = {}
            for frame in reader.read(SamplePlan("count", runs, len(runs)), open_end=False):
                h, w = frame.rgb.shape[:2]
                scale = min(1.0, THUMB_MAX_SIDE / max(h, w))
                size = (max(1, round(w * scale)), max(1, round(h * scale)))
                small = cv2.resize(frame.rgb, size, interpolation=cv2.INTER_AREA)
                ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(small, cv2.COLOR_RGB2BGR),
                                        [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
                if ok:
                    out[wanted[frame.run]] = jpeg.tobytes()
            return out, None if out else "no frame decoded there"
    except VQAError as e:
        return {}, f"{e.code}: {e.message}"
    except MemoryError:
        return {}, f"{ErrorCode.E_MEMORY_LIMIT}: out of memory decoding it"
    except Exception as e:  # noqa: BLE001 - a thumbnail never fails the report
        return {}, f"{type(e).__name__}: {e}"


def _serve(conn: Connection[Any, Any], memory_mb: int | None) -> None:
    _limit_memory(memory_mb)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(take(*job))


class Helper:
    """The spawned process that decodes; a context manager. ``run`` kills and replaces it
    on a timeout or a crash."""

    def __init__(self, *, timeout_s: float | None = TIMEOUT_S, memory_mb: int | None = MEMORY_MB):
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self._ctx = mp.get_context("spawn")
        self._proc: SpawnProcess | None = None
        self._conn: Connection[Any, Any] | None = None  # to the process, made with it

    def _start(self) -> Connection[Any, Any]:
        self._conn, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child, self.memory_mb), daemon=True,
                                       name="vqa-thumbnails")
        self._proc.start()
        child.close()
        return self._conn

    def _stop(self, kill: bool) -> None:
        proc, conn = self._proc, self._conn
        if proc is None or conn is None:
            return
        try:
            if not kill:
                conn.send(None)
                proc.join(5)
        except OSError:
            pass
        if proc.is_alive():
            proc.kill()
        proc.join()
        conn.close()
        self._proc = self._conn = None

    def run(self, path: str, decoder: str, fingerprint: str, times: list[float]
            ) -> tuple[dict[float, bytes], str | None]:
        if self._conn is None:  # not running (the process and its pipe come and go together)
            self._conn = self._start()
        try:
            self._conn.send((path, decoder, fingerprint, times))
            if self._conn.poll(self.timeout_s):
                return self._conn.recv()
            problem = f"{ErrorCode.E_TIMEOUT}: decoding went past {self.timeout_s:g} s"
        except (EOFError, OSError):
            problem = f"{ErrorCode.E_WORKER_CRASH}: the decoder died on it"
        self._stop(kill=True)
        return {}, problem

    def close(self) -> None:
        self._stop(kill=False)

    def __enter__(self) -> Helper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_thumbnails(requests: list[Request], *, progress: Callable[[int], None] | None = None,
                    timeout_s: float | None = TIMEOUT_S, memory_mb: int | None = MEMORY_MB) -> None:
    """Fill each request's shots with a data URI or a problem; ``progress(1)`` after each video."""
    with Helper(timeout_s=timeout_s, memory_mb=memory_mb) as helper:
        for req in requests:
            if req.shots:
                taken, problem = helper.run(req.path, req.decoder, req.fingerprint, [s.t_s for s in req.shots])
                for shot in req.shots:
                    jpeg = taken.get(shot.t_s)
                    if jpeg is not None:
                        shot.src = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
                    else:
                        shot.problem = problem or "no frame decoded there"
            if progress is not None:
                progress(1)


def request_for(row: Mapping[str, Any], record: Mapping[str, Any]) -> Request:
    given_config, given_video = record.get("config"), record.get("video")  # read from a file: anything
    config: dict[str, Any] = given_config if isinstance(given_config, dict) else {}
    video: dict[str, Any] = given_video if isinstance(given_video, dict) else {}
    decoder, fingerprint = config.get("decoder"), video.get("fingerprint")
    path = record.get("path")  # as scored, with a non-UTF-8 name's bytes; the row's is for display
    return Request(os.fsdecode(path if isinstance(path, str) else row["path"]),
                   decoder if isinstance(decoder, str) and decoder in ("pyav", "opencv") else "pyav",
                   fingerprint if isinstance(fingerprint, str) else "", plan_shots(row))
