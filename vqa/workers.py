"""Decode workers: processes that open videos, decode the planned frames and write fragment
views into the shared-memory ring (vqa.batch).

Each worker is a spawned process (no inherited decoder or thread state; FFmpeg's threads and
PyTorch's pools do not mix with fork). Decoders are opened inside the worker with one FFmpeg
thread, so N workers use N cores and never oversubscribe. Messages to the parent:

    ("start", task_id, pid)                   a task was taken (so a crash can be blamed on it)
    ("acquire", task_id, slot)                a ring slot is being filled (returned on a crash)
    ("info", task_id, VideoInfo, keyframes_s) answer to a probe
    ("batch", task_id, slot, [FrameMeta...])  ``len(metas)`` views are in ring slot ``slot``
    ("done", task_id, frames_decoded, decode_errors)
    ("unused", task_id, slot)                 an acquired slot goes back unfilled
    ("error", task_id, code, message)         the task failed; the video gets an error record
"""
from __future__ import annotations

import os
import queue
from dataclasses import dataclass

from .batch import RingSpec, RingWriter
from .decode import open_video
from .errors import VQAError
from .preprocess import FrameStats, fragments, frame_stats
from .types import SamplePlan

PARENT_CHECK_S = 1.0  # how often an idle worker checks that its parent is still alive


@dataclass(frozen=True)
class ProbeTask:
    task_id: int
    path: str
    decoder: str
    want_keyframes: bool


@dataclass(frozen=True)
class DecodeTask:
    task_id: int
    path: str
    decoder: str
    plan: SamplePlan  # the runs of this segment only
    run_offset: int  # index of the segment's first run in the video's plan
    open_end: bool  # the video's last segment: its last run may read to the end of the stream
    threads: int = 1  # FFmpeg threads: more than 1 only when a video could not be split


@dataclass(frozen=True)
class FrameMeta:
    run: int
    pts_s: float
    stats: FrameStats


KEYFRAME_SCAN_PACKETS = 20_000  # about 13 min at 25 fps; longer videos are split blind


def keyframe_times(path: str) -> list[float] | None:
    """Presentation times of the keyframes, read from packets alone (no decoding); None when
    the video is too long to scan cheaply or cannot be demuxed."""
    import av  # the decode stage owns av; this is part of it

    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            start = stream.start_time or 0
            times = []
            for n, p in enumerate(container.demux(stream)):
                if n >= KEYFRAME_SCAN_PACKETS:
                    return None
                if p.is_keyframe and p.pts is not None:
                    times.append(float((p.pts - start) * p.time_base))
            return sorted(times)
    except (av.error.FFmpegError, IndexError):
        return None


def _probe(task: ProbeTask, results) -> None:
    with open_video(task.path, backend=task.decoder, threads=1) as reader:
        info = reader.info
    keyframes = keyframe_times(task.path) if task.want_keyframes else None
    results.put(("info", task.task_id, info, keyframes))


def _parent_alive(parent: int = os.getppid()) -> bool:
    # The default is taken when a spawned worker imports this module: its parent's pid.
    return os.getppid() == parent


def _decode(task: DecodeTask, results, ring: RingWriter) -> None:
    slot, metas = None, []
    try:
        with open_video(task.path, backend=task.decoder, threads=task.threads) as reader:
            for frame in reader.read(task.plan, open_end=task.open_end):
                if slot is None:
                    slot = ring.acquire(_parent_alive)  # blocks while every slot is in use: back-pressure
                    results.put(("acquire", task.task_id, slot))
                ring.slot(slot)[len(metas)] = fragments(frame.rgb)
                metas.append(FrameMeta(task.run_offset + frame.run, frame.pts_s, frame_stats(frame.rgb)))
                if len(metas) == ring.spec.batch_size:
                    results.put(("batch", task.task_id, slot, metas))
                    slot, metas = None, []
            if metas:
                results.put(("batch", task.task_id, slot, metas))
                slot = None
            results.put(("done", task.task_id, reader.frames_decoded, reader.decode_errors))
    finally:
        if slot is not None:  # acquired but not handed over (an error mid-batch): give it back
            results.put(("unused", task.task_id, slot))


def worker_main(tasks, results, ring_spec: RingSpec, free) -> None:
    """Loop: take a task, run it, report. ``None`` ends the loop; so does the parent's death."""
    ring = RingWriter(ring_spec, free)
    try:
        while True:
            try:
                task = tasks.get(timeout=PARENT_CHECK_S)
            except queue.Empty:
                if not _parent_alive():
                    return
                continue
            if task is None:
                return
            results.put(("start", task.task_id, os.getpid()))
            try:
                if isinstance(task, ProbeTask):
                    _probe(task, results)
                else:
                    _decode(task, results, ring)
            except VQAError as e:
                results.put(("error", task.task_id, e.code, e.message))
            except Exception as e:  # a decoder fault on one file must not take the worker down
                results.put(("error", task.task_id, "E_INTERNAL", f"{type(e).__name__}: {e}"))
    except KeyboardInterrupt:
        return  # Ctrl-C reaches the whole process group; the parent cleans up
    finally:
        ring.close()


class WorkerPool:
    """The parent's side: starts the workers, hands out tasks, notices deaths.

    ``get`` returns worker messages, plus ``("crash", task_id, exitcode, slots)`` for a task
    whose worker died (killed, segfault, out of memory); that worker is replaced, and
    ``slots`` are the ring slots it held, for the caller to release.
    """

    def __init__(self, ctx, workers: int, ring):
        self._ctx, self._ring = ctx, ring
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self._procs: list = []
        self._running: dict[int, int] = {}  # pid -> task_id
        self._held: dict[int, set[int]] = {}  # task_id -> ring slots being filled
        for _ in range(workers):
            self._spawn()

    def _spawn(self) -> None:
        p = self._ctx.Process(target=worker_main, args=(self.tasks, self.results, self._ring.spec, self._ring.free),
                              daemon=True, name="vqa-decode")
        p.start()
        self._procs.append(p)

    def submit(self, task) -> None:
        self.tasks.put(task)

    def get(self, timeout_s: float):
        try:
            msg = self.results.get(timeout=timeout_s)
        except queue.Empty:
            return self._reap()
        kind, task_id = msg[0], msg[1]
        if kind == "start":
            self._running[msg[2]] = task_id
        elif kind == "acquire":
            self._held.setdefault(task_id, set()).add(msg[2])
        elif kind in ("batch", "unused"):
            self._held.get(task_id, set()).discard(msg[2])
        if kind in ("info", "done", "error"):  # the task is over: a later death is not its fault
            self._running = {pid: t for pid, t in self._running.items() if t != task_id}
            self._held.pop(task_id, None)
        return msg

    def _reap(self):
        for p in self._procs:
            if p.is_alive():
                continue
            self._procs.remove(p)
            p.join()
            self._spawn()
            task_id = self._running.pop(p.pid, None)
            if task_id is not None:
                return ("crash", task_id, p.exitcode, self._held.pop(task_id, set()))
        return None

    def close(self) -> None:
        for _ in self._procs:
            self.tasks.put(None)
        for p in self._procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join()
        self._procs.clear()
        for q in (self.tasks, self.results):
            q.close()
            q.cancel_join_thread()
