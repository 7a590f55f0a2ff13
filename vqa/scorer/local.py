"""The public face of the engine: ``Scorer``, and ``score`` on a process-wide default.

A ``Scorer`` loads the model once and scores videos through one engine (vqa.engine: in this
process with ``workers=0``, else over a pool of decode workers). It is safe to share between
threads and with asyncio: ``submit`` returns a ``concurrent.futures.Future``, and ``score``,
``score_many`` and ``ascore`` are built on it. A bad video never raises: it comes back as a
``status="error"`` record with a stable code.
"""
from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import warnings
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from ..config import ScoreOptions
from ..engine.base import Engine
from ..engine.local import LocalEngine
from ..engine.pool import PoolEngine
from ..engine.processes import process_alive
from ..engine.worker import guard_spawned_import
from ..infer import Inferencer, model_files, open_inferencer
from ..lifecycle import (Owner, keep_standard_descriptors, mark_exiting, on_engine_thread, refuse_on_engine_thread,
                        refuse_when_exiting)
from ..inputs import path_arg, resolved_here
from ..model import load_model_spec
from ..spool import submit_spooled
from ..types import VideoScore

LOOKAHEAD_PER_WORKER = 4  # score_many keeps this many requests per worker ahead of its output

PathArg = str | bytes | os.PathLike


class Scorer:
    """Scores videos with one loaded model. Use as a context manager, or call ``close()``.

    >>> with Scorer(backend="openvino") as scorer:       # doctest: +SKIP
    ...     for result in scorer.score_many(["a.mp4", "b.mkv"]):
    ...         print(result.path, result.score, result.category)

    Sharing: every method may be called from any number of threads at once, and ``ascore``
    from asyncio. All callers share one model and one pool of decode workers; each gets the
    records of its own videos, and a record never depends on what else is being scored.
    ``close()`` cancels what is still in flight; calls after it raise RuntimeError.

    Threads: ``workers`` decode processes (one FFmpeg and one OpenCV thread each) plus
    ``threads`` inference threads never add up to more than the cores this process may use
    (CPU affinity and cgroup quota; vqa.threads), unless both are given. By default they
    share the cores half and half, at least one each.

    Scripts: workers are spawned processes that import the main script again, so a script
    must make its Scorer (or call ``vqa.score``) under ``if __name__ == "__main__":``.
    Without the guard, building the Scorer raises UsageError saying so. ``workers=0`` needs
    no guard.

    Isolation, with decode workers (``workers >= 1``):

    - ``timeout_s``: a wall-clock limit on each decode task: the probe, and each segment of a
      video split across workers, counted from when a worker takes the task, not counting the
      time it waits for this process's inference. ``"auto"``: ``auto_timeout_s`` after the
      probe (120 s for the probe); ``None`` or 0: no limit. A task past it has its worker and
      the worker's children killed and replaced; the video gets ``E_TIMEOUT``, the job goes on.
    - ``worker_memory_mb``: each worker's address-space limit (RLIMIT_AS) in MiB, besides the
      shared ring. ``"auto"``: ``auto_worker_memory_mb(workers)``; ``None`` or 0: no limit. An
      allocation beyond it gives ``E_MEMORY_LIMIT`` (or ``E_WORKER_CRASH`` if it kills the worker).
    - A worker that dies costs its video: it is retried once, then ``E_WORKER_CRASH``.

    With ``workers=0`` videos decode in this process: nothing can stop a stuck decoder or cap
    its memory, so ``timeout_s`` and ``worker_memory_mb`` are accepted but have no effect.
    Neither enters ``config``: results do not depend on them.
    """

    def __init__(self, options: ScoreOptions | None = None, /, *, cores: int | None = None, **kwargs: Any):
        """``Scorer(backend="pytorch", workers=0)`` or ``Scorer(ScoreOptions(...))`` (not both):
        each option, its default and its bounds are in vqa.config.ScoreOptions. ``cores``: the
        cores to plan workers and threads for (default: those this process may use)."""
        if options is None:
            options = ScoreOptions(**kwargs)
        elif kwargs:
            raise TypeError(f"pass a ScoreOptions or keyword options, not both ({', '.join(kwargs)})")
        self._lifecycle = Owner("Scorer")
        self._closed = True  # until built: a half-made Scorer is never "unclosed" (__del__)
        refuse_when_exiting()
        resolved = options.resolve(cores)  # refused here, before any worker or model
        guard_spawned_import()  # inside a decode worker this is the user's unguarded script
        keep_standard_descriptors()  # before the first file, pipe or ring: none may land at 0, 1 or 2
        self.options, self.resolved = options, resolved
        self.workers, self.threads = resolved.workers, resolved.threads
        self.spec = load_model_spec(options.model_dir)
        self.model = self.spec.record(model_files(options.backend, options.precision))  # each record's
        self.config = resolved.record_config()
        self._lock = threading.Lock()
        self.inferencer: Inferencer | None = None
        self._engine: Engine | None = None
        try:
            self._engine = self._new_engine(self._open_inferencer)
        except BaseException:
            if self.inferencer is not None:
                self.inferencer.close()
            raise
        self._closed = False

    def _open_inferencer(self):
        o = self.options
        self.inferencer = open_inferencer(self.spec, backend=o.backend, threads=self.threads,
                                          precision=o.precision, mode=o.mode)
        return self.inferencer

    def _new_engine(self, inferencer):
        # The engine gets a record maker that does not hold this Scorer: the engine's thread
        # holds the engine, and nothing it keeps may stop a dropped Scorer from being collected.
        new_record = functools.partial(_new_record, dict(self.model), dict(self.config))
        if self.workers == 0:
            return LocalEngine(self.resolved, self.spec, inferencer() if callable(inferencer) else inferencer,
                               new_record)
        if self.resolved.gpu_native and self.resolved.gpu_processes > 1:  # the model loads in each process
            from ..engine.gpu_processes import GpuProcesses
            return GpuProcesses(self.resolved, new_record, processes=self.resolved.gpu_processes, sessions=self.workers)
        if self.resolved.gpu_native:  # NVDEC into the GPU's own preparation: no decode workers
            from ..engine.gpu import GpuEngine
            return GpuEngine(self.resolved, self.spec, inferencer() if callable(inferencer) else inferencer,
                             new_record, sessions=self.workers)
        # The pool engine starts its workers first, and opens the model while they start.
        return PoolEngine(self.resolved, self.spec, inferencer, new_record)

    # -- scoring -------------------------------------------------------------------------

    def submit(self, path: PathArg | Any, *, split: bool = False, name: str | None = None) -> Future:
        """Start scoring one video; the Future's result is its ``VideoScore``. Any thread may
        call it, any number of times: the videos share this Scorer's workers and model, and
        each Future gets its own video's record. ``future.cancel()`` stops the video's work
        (with ``workers=0``, only before it starts: a decoder in this process cannot be stopped).
        ``split=True`` spreads the video over every worker, for the lowest latency when it is
        scored alone (``score`` does that); by default one worker reads it, which keeps the
        cores busiest when many videos are in flight.

        With ``name``, the first argument is the video itself, not its path: ``bytes`` (or any
        bytes-like object) or a binary file object, read to its end now (an upload held in
        memory, an object-store body). It is spooled to a private file (mode 0600, in a folder
        of mode 0700 under the temporary folder), scored exactly as a path is, with the same
        checks and limits, and deleted once scored; the record's ``path`` is ``name``.

        >>> scorer.submit(body_bytes, name="clip.mp4").result().path    # doctest: +SKIP
        'clip.mp4'
        """
        self._lifecycle.check()  # a forked child: a clear error now, not a wait for a thread it lacks
        if name is not None:
            return submit_spooled(self.submit, path, name, split)
        path = path_arg(path)
        # Relative to the caller's current folder now, not the one the workers were started in;
        # the record keeps the path as given.
        opened = resolved_here(path)
        with self._lock:
            if self._closed:
                raise RuntimeError("this Scorer is closed")
            if self._engine is not None and self._engine.broken is not None:  # its dispatcher failed
                self._engine.close()
                self._engine = None
            if self._engine is None:  # start afresh; one that failed to start is tried again here
                self._engine = self._new_engine(self.inferencer)
            return self._engine.submit(opened, split, shown=path)  # quick: a queue put and a wake-up

    def score(self, path: PathArg) -> VideoScore:
        """Score one video and return its record. A video that cannot be scored gives a record
        with ``status="error"`` and ``error={"code", "message"}``; this never raises for one.
        Thread-safe."""
        future = self.submit(path, split=True)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C, or the engine failed: do not leave its work running
            raise

    async def ascore(self, path: PathArg) -> VideoScore:
        """``score`` for asyncio: ``record = await scorer.ascore(path)``. The event loop is
        not blocked; cancelling the awaiting task cancels the video's work. Like ``submit``,
        one worker reads each video, since coroutines usually have many in flight."""
        import asyncio  # here: `vqa score` never needs it, and it costs start-up

        return await asyncio.wrap_future(self.submit(path))

    def score_many(self, paths: Iterable[PathArg]) -> Iterator[VideoScore]:
        """One record per path, in input order, each as soon as it and all before it are done.

        ``paths`` is read lazily, a bounded number ahead of the records handed out
        (``LOOKAHEAD_PER_WORKER`` per worker), so a generator of any length works in flat
        memory. A single str or PathLike is refused with TypeError: pass ``[path]``.
        Stopping early (``break``, an exception) cancels the videos still in flight. An error
        raised by ``paths`` itself, or by a bad item in it, comes after the records of the
        paths before it.
        """
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise TypeError(f"score_many takes an iterable of paths, not one path ({paths!r}); "
                            f"use score(path) or score_many([path])")
        return self._ordered(iter(paths), LOOKAHEAD_PER_WORKER * max(1, self.workers))

    def _ordered(self, paths: Iterator, lookahead: int) -> Iterator[VideoScore]:
        # An error from ``paths`` itself, or a path submit() refuses, is raised after the records
        # of every path before it: they were started, and a caller would lose them otherwise.
        errors: list[Exception] = []
        source = _until_error(paths, errors)
        # Fewer videos than workers in all: each is split across them; more: one worker each.
        first = list(itertools.islice(source, self.workers))
        split = len(first) < self.workers
        ahead: deque[Future] = deque()
        try:
            for path in itertools.chain(first, source):
                try:
                    ahead.append(self.submit(path, split=split))
                except Exception as e:  # noqa: BLE001 - raised below, after the records before it
                    errors.append(e)
                    break
                if len(ahead) >= lookahead:
                    yield _next_record(ahead)
            while ahead:
                yield _next_record(ahead)
            if errors:
                raise errors[0]
        finally:
            for future in ahead:
                future.cancel()

    def _new_record(self, path: str) -> VideoScore:
        return _new_record(self.model, dict(self.config), path)

    def health(self) -> dict[str, Any]:
        """Whether this Scorer can score now, for a health probe: ``ok`` when the model is
        loaded, the Scorer is open, its engine has not failed and every decode worker is alive
        (with ``workers=0`` none are needed); ``error`` says how the engine failed, if it did."""
        engine = self._engine
        broken = getattr(engine, "broken", None)
        pool = getattr(engine, "pool", None)
        pids = list(pool.pids) if pool is not None else []
        alive = sum(1 for pid in pids if process_alive(pid))
        # The GPU engine's processes each hold their own model: loaded once they have all started.
        model = self.inferencer is not None or getattr(engine, "started", False)
        nvdec = self.resolved.nvdec_workers
        return {"ok": model and broken is None and alive == len(pids) and not self._closed, "model_loaded": model,
                "workers": self.workers, "workers_alive": alive,
                **({"nvdec_workers": nvdec} if nvdec else {}),  # counted in workers_alive too
                **({"error": repr(broken)} if broken is not None else {})}

    # -- the engine's parts, for tests and tools -----------------------------------------

    @property
    def _pool(self):
        return getattr(self._engine, "pool", None)

    @property
    def _ring(self):
        return getattr(self._engine, "ring", None)

    def _start_pool(self):
        return self._pool, self._ring

    def close(self) -> None:
        """Stop the workers, free the shared memory and the model. Videos still in flight are
        cancelled. Idempotent. In a forked child it only marks this copy closed: what it holds
        is the parent's. From a done-callback it raises CallbackError (it would join the thread
        running the callback); close it from any other thread."""
        if not self._lifecycle.here:
            self._closed = True
            return
        refuse_on_engine_thread("close()")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._engine is not None:
                self._engine.close()
        finally:
            if self.inferencer is not None:
                self.inferencer.close()

    def __del__(self) -> None:
        # A Scorer dropped without close(): release its workers, ring, descriptors and threads
        # now, and say so as an unclosed file does (ResourceWarning: shown with -W default, -X dev).
        if getattr(self, "_closed", True) or not self._lifecycle.here:
            return
        try:
            # stacklevel 1: a collection has no caller to point at (an unclosed file's is the same)
            warnings.warn(f"unclosed Scorer {self!r}: close() it or use it in a with block", ResourceWarning,
                          stacklevel=1, source=self)
        except Warning:  # -W error: released all the same, then Python reports it ("Exception ignored in")
            self._release_dropped()
            raise
        except Exception:  # noqa: BLE001 - at interpreter exit modules may be half torn down
            pass
        self._release_dropped()

    def _release_dropped(self) -> None:
        try:
            if on_engine_thread():  # collected on an engine's thread: it cannot join itself
                threading.Thread(target=self.close, name="vqa-close", daemon=True).start()
            else:
                self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit modules may be half torn down
            pass

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# vqa.score()'s Scorers, least recently used first: those of DEFAULTS_KEPT option sets are kept.
# A program that varies its options per call (frames, timeout_s) made one per set, each with its
# model and workers, for good: 20 sets held 21 processes and 2.9 GB.
DEFAULTS_KEPT = 4
_defaults: OrderedDict[ScoreOptions, Scorer] = OrderedDict()
_in_use: Counter[ScoreOptions] = Counter()  # vqa.score() calls running on each: never retired then
_defaults_lock = threading.Lock()


def _new_record(model: dict, config: dict, path: str) -> VideoScore:
    return VideoScore(path=path, status="error", model=dict(model), config=dict(config))


def _forget_defaults_in_child() -> None:
    """In a forked child, the parent's default Scorers are the parent's: vqa.score() there makes
    its own. The lock is new too: another thread may have held it at the fork."""
    global _defaults_lock
    _defaults.clear()
    _in_use.clear()
    _defaults_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_defaults_in_child)


def _next_record(ahead: deque[Future]) -> VideoScore:
    """The first future's record, taken off only once it is there: Ctrl-C (or any exception)
    while waiting for it leaves it in ``ahead``, where score_many cancels it with the rest."""
    record = ahead[0].result()
    ahead.popleft()
    return record


def _until_error(paths: Iterator, errors: list[Exception]) -> Iterator:
    """``paths`` until it raises; the error goes into ``errors`` and the iteration just ends."""
    try:
        yield from paths
    except Exception as e:  # noqa: BLE001 - the caller raises it in its turn
        errors.append(e)


def default_scorer(**options) -> Scorer:
    """The process-wide Scorer for ``options``: made on first use (model loaded, workers
    started), then shared by every later call with the same options, from any thread, until
    the interpreter exits or it is retired (``score``)."""
    return _take(ScoreOptions(**options), use=False)  # an unknown option is a TypeError here


def _take(key: ScoreOptions, use: bool) -> Scorer:
    with _defaults_lock:
        refuse_when_exiting()
        scorer = _defaults.get(key)
        if scorer is None or scorer._closed:
            scorer = _defaults[key] = Scorer(key)
        _defaults.move_to_end(key)
        _in_use[key] += use
        idle = [k for k in _defaults if not _in_use[k] and k != key][:max(0, len(_defaults) - DEFAULTS_KEPT)]
        retired = [_defaults.pop(k) for k in idle]
    for old in retired:  # outside the lock: close() joins its threads
        if old._lifecycle.here:
            old.close()
    return scorer


def _close_defaults() -> None:
    with _defaults_lock:  # a default Scorer being made now is finished first, then closed here
        scorers = list(_defaults.values())
        _defaults.clear()
    for scorer in scorers:
        if scorer._lifecycle.here:
            scorer.close()


@atexit.register
def _at_exit() -> None:
    mark_exiting()
    _close_defaults()


def score(path: PathArg, **options) -> VideoScore:
    """Score one video with the process-wide default Scorer for ``options`` (see
    ``default_scorer``): the first call loads the model and starts the workers, later calls
    reuse them. Thread-safe. The Scorers of the ``DEFAULTS_KEPT`` option sets used last are
    kept; an older one is closed when no call is using it. For control over its lifetime,
    make a ``Scorer`` of your own."""
    key = ScoreOptions(**options)
    scorer = _take(key, use=True)
    try:
        return scorer.score(path)
    finally:
        with _defaults_lock:
            _in_use[key] -= 1
