"""The one seam between the service and the scoring engine: every call the service makes into
vqa's engine, folder job and job store is here, so a change of engine API is a change of this
module only.

- ``open_engine``: the one Scorer of this server process (model loaded once, one worker pool).
- ``check_results``: the results store opens (it is a vqa job store of this version).
- ``run``: a job's inputs through ``vqa.job.run_folder_job`` on the shared Scorer: the same
  records, job store and resume as ``vqa score``.
- ``submit``: one uploaded file, alone, for the lowest latency.
- ``health``: model loaded, decode workers alive.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from vqa.config import ScoreOptions
from vqa.errors import UsageError
from vqa.inputs import Input
from vqa.job import Outcome, run_folder_job
from vqa.jobstore import JobStore

Observe = Callable[[float], None]  # told each video's seconds from submit to record


def open_engine(options: ScoreOptions, engine: str = "local", actors_per_node: int | None = None):
    """The server's Scorer (``engine="ray"``: a RayScorer, this process its driver); raises
    VQAError (UsageError, ModelError, BackendUnavailable, ...) as ``vqa score`` would."""
    from vqa.scorer.by_engine import open_scorer
    extra = {} if actors_per_node is None else {"actors_per_node": actors_per_node}
    return open_scorer(options, engine=engine, **extra)


def check_results(path: str) -> None:
    """UsageError now, at start-up, for a results store that is not one (not at every job),
    saying what an operator of the service does about it (it has no --db to pass)."""
    try:
        JobStore(path).close()
    except UsageError as e:
        problem = "; ".join(part for part in e.message.split("; ") if "--db" not in part and "re-run" not in part)
        raise UsageError(f"{problem}; stop vqa serve, move {path} aside (with any -wal and -shm beside it) and "
                         "start it again: files are then scored again, jobs and their records are kept") from None


class _Shared:
    """The server's scorer as one job sees it (``make_scorer`` of the folder job): each video's
    time observed, and once the job must stop (``stopped()``), every further video refused with
    a cancelled future. The job then yields the videos it had started, in order, finished and
    stored, and ends with CancelledError where the refused ones begin. Leaving the job does not
    close the scorer: the next job and the uploads share it."""

    def __init__(self, scorer, observe: Observe, stopped: Callable[[], bool]):
        self._scorer, self._observe, self._stopped = scorer, observe, stopped

    def __getattr__(self, name: str) -> Any:  # model, config, workers: the scorer's own
        return getattr(self._scorer, name)

    def submit(self, path: str, split: bool = False) -> Future:
        if self._stopped():
            refused: Future = Future()
            refused.cancel()
            return refused
        return _timed(self._scorer.submit(path, split=split), self._observe)

    def close(self) -> None:
        pass

    def __enter__(self) -> _Shared:
        return self

    def __exit__(self, *exc) -> None:
        pass


def _timed(future: Future, observe: Observe) -> Future:
    started = time.monotonic()

    def done(f: Future) -> None:
        if not f.cancelled():
            observe(time.monotonic() - started)
    future.add_done_callback(done)
    return future


def run(scorer, options: ScoreOptions, inputs: list[Input], *, store: str, observe: Observe,
        stopped: Callable[[], bool], on_outcome: Callable[[Outcome], None]) -> None:
    """Score ``inputs`` (expanded and checked already) as ``vqa score`` would, with ``store`` as
    its job store; ``on_outcome`` hears of each record, in order, once it is stored. Once
    ``stopped()``, the videos in flight finish and are handed out, then CancelledError."""
    shared = _Shared(scorer, observe, stopped)
    run_folder_job(inputs, options, output=os.devnull, db=store, on_outcome=on_outcome,
                   make_scorer=lambda _options, **_engine: shared)


def submit(scorer, path: str, observe: Observe) -> Future:
    """Score one file alone (split over every worker); the Future's result is its record dict."""
    return _timed(scorer.submit(path, split=True), observe)


def record_of(result) -> dict[str, Any]:
    return result.to_dict()


def health(scorer) -> dict[str, Any]:
    """The Scorer's own ``health()``: model loaded, engine not failed, decode workers alive."""
    return scorer.health()
