"""Decode workers: processes that open videos, decode the planned frames and write fragment
views into the shared-memory ring (vqa.batch).

Each worker is a spawned process (no inherited decoder or thread state; FFmpeg's threads and
PyTorch's pools do not mix with fork). Decoders are opened inside the worker with one FFmpeg
thread (and one OpenCV thread), so N workers use N cores and never oversubscribe. Messages
to the parent are the typed records below: ``Ready`` once at start-up, then for each task
``Probed`` (a probe's answer) or ``Batch`` messages and ``Done``, or ``Failed``. The pool
adds ``Crashed`` and ``TimedOut`` for tasks whose worker died or ran past its limit.

A worker limits its own address space (``RLIMIT_AS``) at start-up when asked to: an allocation
beyond it raises ``MemoryError`` there, reported as ``E_MEMORY_LIMIT``, instead of letting a
runaway decoder push the machine into the kernel's OOM killer.
"""
from __future__ import annotations

import math
import os
import signal
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path

from .batch import RingSpec, RingWriter
from .decode import open_video
from .errors import UsageError, VQAError
from .limits import out_of_memory
from .preprocess import FrameStats, fragments, frame_stats
from .types import SamplePlan, VideoInfo

PARENT_CHECK_S = 1.0  # how often an idle worker checks that its parent is still alive
BOOT_TIMEOUT_S = 60.0  # a spawned worker that has not said "ready" by then is stuck: replace it
MAX_BOOT_FAILURES = 3  # workers dying one after another before "ready": give up, do not loop
# Address space a worker needs beyond what it maps at start-up, to decode anything at all:
# measured, 1080p H.264 every frame peaked 174 MiB above the start (README, Isolation).
WORKER_HEADROOM_MB = 256
# The exit status of a worker that found itself re-running the user's script: the script
# made a Scorer outside an `if __name__ == "__main__":` block (see guard_spawned_import).
EXIT_UNGUARDED_SCRIPT = 78
UNGUARDED_MESSAGE = (
    "the script that uses vqa.Scorer (or vqa.score) with decode workers must create it inside "
    "an `if __name__ == \"__main__\":` block: each worker is a spawned process that imports "
    "the script again, and there it would start workers of its own. Add the guard, or pass "
    "workers=0 to decode in this process")


@dataclass(frozen=True)
class ProbeTask:
    task_id: int
    path: str
    decoder: str
    want_keyframes: bool
    timeout_s: float | None = None  # enforced by the parent (WorkerPool), from when a worker takes it


@dataclass(frozen=True)
class DecodeTask:
    task_id: int
    path: str
    decoder: str
    plan: SamplePlan  # the runs of this segment only
    run_offset: int  # index of the segment's first run in the video's plan
    open_end: bool  # the video's last segment: its last run may read to the end of the stream
    threads: int = 1  # FFmpeg threads: more than 1 only when a video could not be split
    timeout_s: float | None = None  # enforced by the parent (WorkerPool), from when a worker takes it


@dataclass(frozen=True)
class FrameMeta:
    run: int
    pts_s: float
    stats: FrameStats


# --- messages to the parent ------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """Once, at start-up: the worker takes tasks now. ``address_space_mb``: what it maps already
    (None where /proc cannot say), to check a memory limit against."""
    pid: int
    address_space_mb: int | None


@dataclass(frozen=True)
class Probed:
    task_id: int
    info: VideoInfo
    keyframes_s: list[float] | None


@dataclass(frozen=True)
class Batch:
    """``len(frames)`` views are in ring slot ``slot``; the parent releases it when done."""
    task_id: int
    slot: int
    frames: list[FrameMeta]


@dataclass(frozen=True)
class Done:
    task_id: int
    frames_decoded: int
    decode_errors: int
    warnings: list[str]


@dataclass(frozen=True)
class Failed:
    """The task failed; the video gets an error record."""
    task_id: int
    code: str
    message: str


@dataclass(frozen=True)
class Crashed:
    """From the pool: the task's worker died (killed, segfault); it was replaced."""
    task_id: int
    exitcode: int | None


@dataclass(frozen=True)
class TimedOut:
    """From the pool: the task ran past its limit; its worker was killed and replaced."""
    task_id: int
    elapsed_s: float


WORKER_NAME = "vqa-decode"
KEYFRAME_SCAN_PACKETS = 20_000  # about 13 min at 25 fps; longer videos are split blind


def _parent_alive(parent: int = os.getppid()) -> bool:
    # The default is taken when a spawned worker imports this module: its parent's pid.
    return os.getppid() == parent


class _Stop(Exception):
    """The parent said stop, or is gone."""


class _Link:
    """A worker's end of its private pipe, and the ring slots it may fill.

    Private pipes, not shared queues: a shared queue's lock dies with a worker killed while
    holding it and then blocks every other worker for good.
    """

    def __init__(self, conn, slots):
        self.conn = conn
        self.free = list(slots)
        self.tasks: list = []

    def _receive(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s):
            if not _parent_alive():
                raise _Stop
            return
        msg = self.conn.recv()
        if msg is None:
            raise _Stop
        if msg[0] == "release":
            self.free.append(msg[1])
        else:
            self.tasks.append(msg[1])

    def next_task(self):
        while not self.tasks:
            self._receive(PARENT_CHECK_S)
        return self.tasks.pop(0)

    def acquire(self) -> int:
        """A free slot of this worker's; waits for the parent to release one (back-pressure)."""
        while not self.free:
            self._receive(PARENT_CHECK_S)
        return self.free.pop()

    def send(self, msg) -> None:
        self.conn.send(msg)


def _decode(task: DecodeTask, link: _Link, ring: RingWriter) -> None:
    slot, metas = None, []
    try:
        with open_video(task.path, backend=task.decoder, threads=task.threads) as reader:
            for frame in reader.read(task.plan, open_end=task.open_end):
                if slot is None:
                    slot = link.acquire()
                ring.slot(slot)[len(metas)] = fragments(frame.rgb)
                metas.append(FrameMeta(task.run_offset + frame.run, frame.pts_s, frame_stats(frame.rgb)))
                if len(metas) == ring.spec.batch_size:
                    link.send(Batch(task.task_id, slot, metas))
                    slot, metas = None, []
            if metas:
                link.send(Batch(task.task_id, slot, metas))
                slot = None
            link.send(Done(task.task_id, reader.frames_decoded, reader.decode_errors, list(reader.warnings)))
    finally:
        if slot is not None:  # taken but not handed over (an error mid-batch): keep it
            link.free.append(slot)


def _limit_memory(memory_mb: int | None, ring_spec: RingSpec) -> None:
    """Cap this process's address space at ``memory_mb`` MiB plus the ring's mapping.

    The ring is the parent's shared memory, sized by it, so it is added rather than counted
    against the worker's own budget. Only the soft limit is set, never above the hard one."""
    if not memory_mb:
        return
    import resource

    limit = (memory_mb << 20) + ring_spec.slots * math.prod(ring_spec.slot_shape)  # uint8 views
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


# issue 9: OpenCV's allocation failures count too; one definition for workers and in-process.
_out_of_memory = out_of_memory


def _run(task, link: _Link, ring: RingWriter) -> None:
    if isinstance(task, ProbeTask):
        with open_video(task.path, backend=task.decoder, threads=1) as reader:
            info = reader.info
            keyframes = reader.keyframe_times(KEYFRAME_SCAN_PACKETS) if task.want_keyframes else None
        link.send(Probed(task.task_id, info, keyframes))
    else:
        _decode(task, link, ring)


def guard_spawned_import() -> None:
    """Called where a Scorer with workers is made: inside a decode worker, that means the
    user's script is being imported again by the spawn start method, with no
    ``if __name__ == "__main__":`` guard. Say so and exit with a status the parent knows."""
    import multiprocessing as mp
    import sys

    # While a spawned child imports the main script, multiprocessing marks it "_inheriting"
    # (its own check for this mistake reads the same flag); the name is set just before.
    me = mp.current_process()
    if getattr(me, "_inheriting", False) and me.name == WORKER_NAME:
        print(f"vqa: error: {UNGUARDED_MESSAGE}", file=sys.stderr)
        sys.exit(EXIT_UNGUARDED_SCRIPT)


def _address_space_mb() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) >> 10
    except (OSError, ValueError, IndexError):
        pass
    return None


def worker_main(conn, ring_spec: RingSpec, slots, memory_mb: int | None = None,
                opencv_threads: int = 1) -> None:
    """Loop: take a task, run it, report. ``None`` ends the loop; so does the parent's death."""
    import cv2  # loaded already by the preprocess stage; its own pool would take every core

    cv2.setNumThreads(opencv_threads)
    link, ring = _Link(conn, slots), RingWriter(ring_spec)
    # After the ring is mapped: a failed attach would unlink the parent's segment (CPython's
    # SharedMemory does that on any OSError while opening it).
    _limit_memory(memory_mb, ring_spec)
    try:
        link.send(Ready(os.getpid(), _address_space_mb()))
        while True:
            task = link.next_task()
            error = None
            try:
                _run(task, link, ring)
            except (_Stop, BrokenPipeError, EOFError):
                raise
            except Exception as e:  # a decoder fault on one file must not take the worker down
                if _out_of_memory(e):
                    error = ("E_MEMORY_LIMIT", f"the decode worker ran out of memory on it "
                                               f"(worker_memory_mb={memory_mb or 'no limit'}): {type(e).__name__}")
                elif isinstance(e, VQAError):
                    error = (e.code, e.message)
                else:
                    error = ("E_INTERNAL", f"{type(e).__name__}: {e}")
            if error is not None:  # sent outside the handler: the traceback's memory is free again
                link.send(Failed(task.task_id, *error))
    except (_Stop, BrokenPipeError, EOFError, KeyboardInterrupt):
        return  # stopped, parent gone, or Ctrl-C (it reaches the whole group; the parent cleans up)
    finally:
        ring.close()
        conn.close()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``: from /proc/<pid>/task/*/children on Linux, else from psutil
    if it is installed, else none (FFmpeg decodes on threads; a worker starts no process)."""
    proc = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            if proc:
                kids = [int(k) for f in Path(f"/proc/{parent}/task").glob("*/children") for k in f.read_text().split()]
            else:
                import psutil

                kids = [c.pid for c in psutil.Process(parent).children()]
        except Exception:  # gone meanwhile, or psutil missing: nothing more to find there
            kids = []
        out += kids
        todo += kids
    return out


@dataclass
class _Worker:
    slots: range
    process: object = None
    conn: object = None
    ready: bool = False  # said "ready": tasks may go to it
    task_id: int | None = None  # the task it is running
    started_s: float = 0.0  # monotonic time the task (or, while booting, the process) started
    deadline_s: float | None = None  # monotonic; pushed back by the time spent blocked on the parent
    blocked_since_s: float | None = None  # every slot of its is with the parent (back-pressure)
    blocked_total_s: float = 0.0


# Pools alive in this process. In a forked child their workers are still listed as children by
# multiprocessing, whose exit hook would SIGTERM them (they are the parent's): the child forgets them.
_pools: weakref.WeakSet = weakref.WeakSet()


def _forget_parents_workers() -> None:
    import multiprocessing.process as mp_process

    for pool in list(_pools):
        for w in pool._workers:
            mp_process._children.discard(w.process)  # the set multiprocessing's exit hook walks


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_workers)


class WorkerPool:
    """The parent's side: starts the workers, hands tasks to ready ones, notices deaths and
    overruns.

    Each worker owns ``slots_per_worker`` ring slots; a batch message hands one to the parent,
    ``release`` hands it back. ``get`` returns worker messages, plus

    - ``Crashed`` for a task whose worker died (killed, segfault, out of memory); that worker
      is replaced by a new one with the same slots;
    - ``TimedOut`` for a task that ran past its ``timeout_s``; its worker and the worker's
      child processes are killed and replaced.

    A task's clock starts when a worker takes it (time in the queue does not count) and stops
    while the worker waits for the parent to release one of its slots (the parent's inference,
    not the decoder, is slow then).
    """

    def __init__(self, ctx, workers: int, ring_spec: RingSpec, slots_per_worker: int,
                 memory_mb: int | None = None):
        self._ctx, self._spec, self._per, self._memory_mb = ctx, ring_spec, slots_per_worker, memory_mb
        self._pid = os.getpid()
        _pools.add(self)
        self._workers = [_Worker(range(i * slots_per_worker, (i + 1) * slots_per_worker)) for i in range(workers)]
        self._waiting: deque = deque()  # tasks for the next ready worker
        self._parent_held: set[int] = set()  # slots handed over and not yet released
        self._boot_failures = 0  # workers in a row that died before "ready"
        for w in self._workers:
            self._spawn(w)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def _spawn(self, w: _Worker) -> None:
        parent_end, child_end = self._ctx.Pipe()
        free = [s for s in w.slots if s not in self._parent_held]
        w.process = self._ctx.Process(target=worker_main, args=(child_end, self._spec, free, self._memory_mb),
                                      daemon=True, name=WORKER_NAME)
        w.process.start()
        child_end.close()
        w.conn, w.task_id, w.ready = parent_end, None, False
        w.started_s, w.deadline_s = time.monotonic(), time.monotonic() + BOOT_TIMEOUT_S
        w.blocked_since_s, w.blocked_total_s = None, 0.0

    def _replace(self, w: _Worker, kill: bool) -> int | None:
        """Kill (if asked) and reap the worker and anything it started; a new one takes its slots.
        Returns the old worker's exit code."""
        if kill:
            family = _descendants(w.process.pid)
            w.process.kill()
            for pid in family:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass  # gone already
        w.process.join()
        if not w.ready:
            if w.process.exitcode == EXIT_UNGUARDED_SCRIPT:
                raise UsageError(UNGUARDED_MESSAGE)
            self._boot_failures += 1
            if self._boot_failures >= MAX_BOOT_FAILURES:
                raise VQAError(f"decode workers die while starting (exit code {w.process.exitcode}); their "
                               f"error is on stderr", code="E_WORKER_CRASH")
        code = w.process.exitcode
        w.conn.close()
        self._spawn(w)
        return code

    def submit(self, task) -> None:
        self._waiting.append(task)
        self._dispatch()

    def cancel(self, task_id: int) -> None:
        """Drop a queued task; kill and replace the worker running it. Nothing is reported."""
        self._waiting = deque(t for t in self._waiting if t.task_id != task_id)
        for w in self._workers:
            if w.task_id == task_id:
                self._replace(w, kill=True)
        self._dispatch()

    def _dispatch(self) -> None:
        for w in self._workers:
            if w.ready and w.task_id is None and self._waiting and w.process.is_alive():
                task = self._waiting.popleft()
                w.task_id = task.task_id
                w.started_s = time.monotonic()
                w.deadline_s = w.started_s + task.timeout_s if task.timeout_s else None
                w.blocked_since_s, w.blocked_total_s = None, 0.0
                self._note_blocked(w)
                try:
                    w.conn.send(("task", task))
                except OSError:
                    pass  # it died; get() notices, blames this task and replaces the worker

    def _note_blocked(self, w: _Worker) -> None:
        """Stop the task's clock while the parent holds every slot of the worker's."""
        now = time.monotonic()
        blocked = w.task_id is not None and all(s in self._parent_held for s in w.slots)
        if blocked and w.blocked_since_s is None:
            w.blocked_since_s = now
        elif not blocked and w.blocked_since_s is not None:
            waited = now - w.blocked_since_s
            w.blocked_total_s += waited
            if w.deadline_s is not None:
                w.deadline_s += waited
            w.blocked_since_s = None

    def release(self, slot: int) -> None:
        self._parent_held.discard(slot)
        w = self._workers[slot // self._per]
        self._note_blocked(w)
        try:
            w.conn.send(("release", slot))
        except OSError:
            pass  # a dead worker's replacement starts with its free slots

    def _overrun(self):
        """Replace the first worker past its deadline; its task's ``TimedOut``, or None."""
        now = time.monotonic()
        for w in self._workers:
            if w.deadline_s is None or w.blocked_since_s is not None or now <= w.deadline_s:
                continue
            if self._has_message(w):  # read what it sent first: maybe its answer, just in time
                continue
            task_id, elapsed = w.task_id, now - w.started_s - w.blocked_total_s
            self._replace(w, kill=True)
            self._dispatch()
            if task_id is not None:
                return TimedOut(task_id, elapsed)
        return None

    @staticmethod
    def _has_message(w: _Worker) -> bool:
        try:
            return w.conn.poll()
        except OSError:
            return False

    def wait_ready(self, timeout_s: float = BOOT_TIMEOUT_S) -> None:
        """Block until every worker has said ``Ready`` (raises what a failed start raises)."""
        deadline = time.monotonic() + timeout_s
        while not all(w.ready for w in self._workers) and time.monotonic() < deadline:
            msg = self.get(min(0.5, max(0.0, deadline - time.monotonic())))
            if msg is not None:  # nothing was submitted yet, so nothing else can come
                raise RuntimeError(f"unexpected message from a decode worker while it starts: {msg!r}")

    def _check_ready(self, msg: Ready) -> None:
        """A memory limit below what a worker maps before decoding anything fails every video:
        refuse it once, for the job, instead of giving every video E_MEMORY_LIMIT."""
        need = None if msg.address_space_mb is None else msg.address_space_mb + WORKER_HEADROOM_MB
        if self._memory_mb and need is not None and self._memory_mb < need:
            raise UsageError(
                f"worker_memory_mb={self._memory_mb} is too low: a decode worker maps "
                f"{msg.address_space_mb} MiB of address space here before it decodes anything, and "
                f"needs about {WORKER_HEADROOM_MB} MiB more to decode; give it at least {need} MiB, "
                f"or 'auto'")

    def get(self, timeout_s: float, also=()):
        """The next message, or None after ``timeout_s``, or at once when one of ``also`` (file
        descriptors, e.g. a wake-up pipe) becomes readable."""
        overrun = self._overrun()
        if overrun is not None:
            return overrun
        deadlines = [w.deadline_s for w in self._workers if w.deadline_s is not None and w.blocked_since_s is None]
        if deadlines:
            timeout_s = max(0.0, min(timeout_s, min(deadlines) - time.monotonic() + 0.001))
        conns = {w.conn: w for w in self._workers}
        sentinels = {w.process.sentinel: w for w in self._workers}
        for ready in wait([*conns, *sentinels, *also], timeout_s):
            if ready in also:
                continue
            if ready in conns:
                w = conns[ready]
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    continue  # the sentinel says why
                if isinstance(msg, Ready):
                    self._check_ready(msg)
                    w.ready, w.deadline_s, self._boot_failures = True, None, 0
                    self._dispatch()
                    return None
                if isinstance(msg, Batch):
                    self._parent_held.add(msg.slot)
                    self._note_blocked(w)
                if isinstance(msg, (Probed, Done, Failed)):
                    w.task_id, w.deadline_s, w.blocked_since_s = None, None, None
                    self._dispatch()
                return msg
            w = sentinels[ready]
            task_id = w.task_id
            code = self._replace(w, kill=False)
            self._dispatch()
            if task_id is not None:
                return Crashed(task_id, code)
        return self._overrun()

    def close(self) -> None:
        if os.getpid() != self._pid:  # a forked child's copy: the workers are the parent's children
            self._workers.clear()
            return
        for w in self._workers:
            if w.task_id is not None:  # busy: it would read the stop only after its task
                w.process.kill()
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._workers:
            w.process.join(timeout=2.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._workers.clear()
