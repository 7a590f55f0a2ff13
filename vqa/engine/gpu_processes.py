"""The GPU engine in several processes (``gpu_processes`` > 1): each a GpuEngine (vqa.engine.gpu)
with its share of the NVDEC sessions, its own CUDA context and its own copy of the network.

Why: a GpuEngine's sessions are threads, and the CPU's share of each video (PyAV's opening,
probing, demuxing and seeking, the reader's Python) holds the GIL for much of its time, so one
process scores at most a few dozen videos a second whatever the GPU could do. Processes each
have a GIL of their own; NVDEC reaches the same ceiling from several processes as from one
(shared/gpu/NVDEC.md). Pictures still never leave the GPU: only paths go to a process and
records come back.

The parent sends each video to the process with the fewest in hand. A process that dies
answers for its videos with E_INTERNAL records and is replaced; a video past its limit is
answered E_TIMEOUT inside its process (vqa.engine.gpu).
"""
from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..codes import ErrorCode
from ..config import Resolved
from ..errors import BackendUnavailable
from ..futures import VideoFuture
from ..lifecycle import Owner, mark_engine_thread, refuse_on_engine_thread
from ..types import VideoScore
from .base import Engine, register

START_TIMEOUT_S = 300.0  # a process loads the model and captures its graphs in this time, or is broken
WATCH_EVERY_S = 1.0
MIN_SESSIONS = 4


def _child(options: Any, sessions: int, new_record: Any, requests: Any, results: Any, factory: Any = None) -> None:
    """A process's life: an engine from ``factory`` (default: a one-process GpuEngine, warmed);
    ``(key, path, shown)`` in, ``(key, record)`` out, until None."""
    engine, close = (factory or _gpu_engine)(options, sessions, new_record)
    try:
        results.put(("ready", None))
        parent = mp.parent_process()
        while True:
            try:
                item = requests.get(timeout=WATCH_EVERY_S)
            except queue.Empty:
                if parent is not None and not parent.is_alive():
                    return  # orphaned: nobody would hear the records
                continue
            if item is None:
                return
            key, path, shown = item

            def answer(future: Future, key: int = key) -> None:
                try:
                    results.put((key, future.result()))
                except BaseException as e:  # noqa: BLE001 - the parent hears of it
                    results.put((key, e))

            engine.submit(path, False, shown).add_done_callback(answer)
    finally:
        close()


def _gpu_engine(options: Any, sessions: int, new_record: Any) -> tuple[Engine, Callable[[], None]]:
    import numpy as np

    from ..infer import open_inferencer
    from ..model import load_model_spec
    from .gpu import GpuEngine

    resolved = options.replace(workers=sessions, gpu_processes=1).resolve()
    spec = load_model_spec(options.model_dir)
    inferencer = open_inferencer(spec, backend=options.backend, threads=resolved.threads,
                                 precision=options.precision, mode=options.mode)
    view = spec.view_size
    inferencer.infer(np.zeros((resolved.batch_size, view, view, 3), np.uint8))  # its graph, now
    engine = GpuEngine(resolved, spec, inferencer, new_record, sessions=sessions)

    def close() -> None:
        engine.close()
        inferencer.close()
    return engine, close


class _Process:
    def __init__(self, ctx: Any, options: Any, sessions: int, new_record: Any, results: Any, factory: Any):
        self.requests = ctx.Queue()
        # Not daemonic: a daemonic process may start no workers (ScoreOptions.resolve refuses it).
        self.process = ctx.Process(target=_child, args=(options, sessions, new_record, self.requests, results, factory),
                                   name="vqa-gpu")
        self.process.start()
        self.pending: dict[int, tuple[Future, str]] = {}


class GpuProcesses(Engine):
    """``processes`` GpuEngines in processes of their own, ``sessions`` NVDEC sessions shared among
    them (at least MIN_SESSIONS each)."""

    def __init__(self, options: Resolved, new_record: Callable[[str], VideoScore], *, processes: int, sessions: int,
                 factory: Any = None):
        """``factory(options, sessions, new_record) -> (engine, close)``, a module-level function: what each
        process runs (default: a GpuEngine; the tests' stand-in runs on the CPU)."""
        if factory is None:  # said here once, not by every process on stderr
            from ..decode import reader_class
            from ..infer.cuda import cuda_problem
            reader_class("nvdec")
            problem = cuda_problem()
            if problem is not None:
                raise BackendUnavailable(f"backend 'cuda' cannot run here: {problem}")
        self._options, self._new_record, self._factory = options.options, new_record, factory
        # At least MIN_SESSIONS each: a session waits on NVDEC for most of a video, so a process
        # with one or two leaves its GIL idle.
        self._sessions = max(MIN_SESSIONS, -(-sessions // processes))
        self._lifecycle = Owner("Scorer")
        self._ctx = mp.get_context("spawn")
        self._results: Any = self._ctx.Queue()
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._closed = False
        self._procs = [self._new_process() for _ in range(processes)]
        self._ready = 0
        self.start_error: str | None = None
        self._started = threading.Event()
        self._collector = threading.Thread(target=self._collect, name="vqa-gpu-collect", daemon=True)
        self._collector.start()
        if not self._started.wait(START_TIMEOUT_S) or self.start_error:
            self.close()
            raise BackendUnavailable(self.start_error or
                                     f"the GPU processes did not start within {START_TIMEOUT_S:g} s")
        self.started = True  # every process has loaded its model (Scorer.health)
        register(self)

    def _new_process(self) -> _Process:
        return _Process(self._ctx, self._options, self._sessions, self._new_record, self._results, self._factory)

    def submit(self, path: str, split: bool = False, shown: str | None = None) -> Future:
        self._lifecycle.check()
        if self._closed:
            raise RuntimeError("the Scorer is closed")
        future: Future = VideoFuture()
        future.set_running_or_notify_cancel()
        name = path if shown is None else shown
        with self._lock:
            key = next(self._keys)
            proc = min(self._procs, key=lambda p: len(p.pending))
            proc.pending[key] = (future, name)
            proc.requests.put((key, path, name))
        return future

    def _collect(self) -> None:
        mark_engine_thread()
        checked = time.monotonic()
        while True:
            try:
                item = self._results.get(timeout=WATCH_EVERY_S)
            except queue.Empty:
                item = ()
            if time.monotonic() - checked >= WATCH_EVERY_S:
                self._check_alive()
                checked = time.monotonic()
            if item is None:
                return
            if not item:
                continue
            key, outcome = item
            if key == "ready":
                self._ready += 1
                if self._ready == len(self._procs):
                    self._started.set()
                continue
            with self._lock:
                found = next((p.pending.pop(key) for p in self._procs if key in p.pending), None)
            if found is None:
                continue  # answered already (its process was found dead first)
            future, _ = found
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _check_alive(self) -> None:
        """Answer for the videos of a process that died, and start another in its place."""
        if self._closed:
            return
        if not self._started.is_set():
            if any(not p.process.is_alive() for p in self._procs):  # it could not start: no respawning
                self.start_error = "a GPU process ended while starting (its error is on stderr)"
                self._started.set()
            return
        with self._lock:
            dead = [p for p in self._procs if not p.process.is_alive()]
            for p in dead:
                self._procs[self._procs.index(p)] = self._new_process()
        for p in dead:
            for future, name in p.pending.values():
                record = self._new_record(name)
                record.error = {"code": ErrorCode.E_INTERNAL.value,
                                "message": f"the GPU process scoring it ended (exit code {p.process.exitcode})"}
                future.set_result(record)

    def close(self) -> None:
        if self._closed:
            return
        if not self._lifecycle.here:
            self._closed = True
            return
        refuse_on_engine_thread("close()")
        self._closed = True
        for p in self._procs:
            p.requests.put(None)
        for p in self._procs:
            p.process.join(60)
            if p.process.is_alive():
                p.process.kill()
            for future, _ in p.pending.values():
                future.cancel()
        self._results.put(None)
        self._collector.join()
