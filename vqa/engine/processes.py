"""The parent's side of the decode workers: ``WorkerPool`` starts them, hands tasks to ready
ones, and notices deaths and overruns (vqa.engine.worker is the child's side).
"""
from __future__ import annotations

import os
import signal
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from ..batch import RingSpec
from ..codes import ErrorCode
from ..config import HYBRID_DECODER, UNLIMITED_DECODERS
from ..errors import BackendUnavailable, ResourceError, UsageError, VQAError
from ..preprocess import TRAINING, Geometry
from . import prestart
from .messages import Batch, Crashed, Done, Failed, Probed, Ready, TimedOut
from .worker import EXIT_UNGUARDED_SCRIPT, UNGUARDED_MESSAGE, WORKER_NAME, worker_main

BOOT_TIMEOUT_S = 60.0  # a spawned worker that has not said "ready" by then is stuck: replace it
MAX_BOOT_FAILURES = 3  # workers dying one after another before "ready": give up, do not loop
# Address space a worker needs beyond what it maps at start-up, to decode anything at all:
# measured, 1080p H.264 every frame peaked 174 MiB above the start (docs/history/hardening.md).
WORKER_HEADROOM_MB = 256


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


def _send(conn, msg) -> None:
    """Send to a worker that may have died: the write fails (EPIPE), and nothing else happens.
    A host that set SIGPIPE back to its default (as command-line tools do, for ``| head``) was
    killed by the signal instead, silently, when a worker died with batches in inference."""
    blocked = hasattr(signal, "pthread_sigmask") and hasattr(signal, "sigtimedwait")
    if blocked:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    try:
        conn.send(msg)
    except OSError:
        pass
    finally:
        if blocked and signal.SIGPIPE not in old:
            while signal.sigtimedwait([signal.SIGPIPE], 0) is not None:  # the one this write raised
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _cwd_gone() -> str:
    """A hint when the reason is the current folder (spawn asks for it): deleted under us."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return " (this process's current folder was deleted)"
    return ""


@dataclass
class _Worker:
    slots: range
    decoder: str | None = None  # decodes every video with this backend, whatever the task names
    process: Any = None  # a multiprocessing Process of the pool's context
    conn: Any = None  # the parent's end of its pipe
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
            mp_process._children.discard(w.process)  # type: ignore[attr-defined]  # what its exit hook walks


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
                 memory_mb: int | None = None, geometry: Geometry = TRAINING, decoder: str | None = None,
                 nvdec_workers: int = 0):
        self._ctx, self._spec, self._per, self._memory_mb = ctx, ring_spec, slots_per_worker, memory_mb
        self._geometry = geometry  # the model's (vqa.model.ModelSpec.preprocessing)
        self._decoder = decoder  # imported by each worker as it starts
        self._pid = os.getpid()
        _pools.add(self)
        # ``nvdec_workers`` more after the ``workers``: NVDEC decodes their videos
        self._workers = [_Worker(range(i * slots_per_worker, (i + 1) * slots_per_worker),
                                 HYBRID_DECODER[1] if i >= workers else None) for i in range(workers + nvdec_workers)]
        self._waiting: deque = deque()  # tasks for the next ready worker
        self._parent_held: set[int] = set()  # slots handed over and not yet released
        self._boot_failures = 0  # workers in a row that died before "ready"
        try:
            for w in self._workers:
                self._spawn(w)
        except BaseException:
            self.close()  # those already started
            raise

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def _spawn(self, w: _Worker) -> None:
        free = [s for s in w.slots if s not in self._parent_held]
        settings: tuple = (self._spec, free, self._memory_mb, 1, self._geometry, self._decoder)
        if w.decoder is not None:  # beside the others; CUDA maps tens of GiB of address space: no limit
            memory = None if w.decoder in UNLIMITED_DECODERS else self._memory_mb
            settings = (self._spec, free, memory, 1, self._geometry, w.decoder, True)
        waiting = prestart.take(self._ctx)  # one the command started as it started, if any
        if waiting is not None:
            w.process, parent_end = waiting
            _send(parent_end, settings)  # if it died meanwhile, get() notices and replaces it (a boot failure)
        else:
            parent_end, child_end = self._ctx.Pipe()
            process = self._ctx.Process(target=worker_main, args=(child_end, *settings), daemon=True,
                                        name=WORKER_NAME)
            try:
                process.start()
            except (OSError, AssertionError) as e:  # no descriptors left, the cwd deleted, a daemon's child
                parent_end.close()
                child_end.close()
                # w keeps the process it had (exited and reaped, or None): close() can still stop the rest
                raise ResourceError(f"a decode worker could not be started: {e!r}{_cwd_gone()}; the pool is "
                                    "stopped and a later call starts it again") from None
            w.process = process
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
                               f"error is on stderr", code=ErrorCode.E_WORKER_CRASH)
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
                _send(w.conn, ("task", task))  # if it died, get() notices, blames this task and replaces it

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
        _send(w.conn, ("release", slot))  # a dead worker's replacement starts with its free slots

    def restart_clock(self, task_id: int, timeout_s: float | None) -> None:
        """The task goes on under a new limit, counted from now: a ProbeDecodeTask past its
        probe gets the decode's limit, as a decode task of its own would."""
        for w in self._workers:
            if w.task_id == task_id:
                w.started_s = time.monotonic()
                w.deadline_s = w.started_s + timeout_s if timeout_s else None
                w.blocked_total_s = 0.0
                if w.blocked_since_s is not None:
                    w.blocked_since_s = w.started_s

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
        """A decoder that does not import, or a memory limit below what a worker maps before
        decoding anything, fails every video: refuse it once, for the job, instead of giving
        every video E_BACKEND or E_MEMORY_LIMIT."""
        if msg.decoder_error is not None:
            raise BackendUnavailable(msg.decoder_error)
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
                if isinstance(msg, (Done, Failed)) or isinstance(msg, Probed) and not msg.decoding:
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
        started = [w for w in self._workers if w.process is not None and w.conn is not None]
        for w in started:
            if w.task_id is not None:  # busy: it would read the stop only after its task
                w.process.kill()
            _send(w.conn, None)
        for w in started:
            w.process.join(timeout=2.0)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self._workers.clear()


def process_alive(pid: int | None) -> bool:
    """A process that exists and is no zombie (for health probes)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie is dead
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
