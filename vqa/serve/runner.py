"""The service without its web layer: the engine, the job store, the bounded queue and the
thread that runs jobs.

One thread takes queued jobs in order and drives each through the engine (``engine.run``),
committing every record before the next; single uploads go to the same Scorer from their
request, so they are scored beside a running job, not after it. Both are bounded
(``Busy``, which the web layer turns into 429 with Retry-After).

Stopping (SIGTERM): ``stop()`` ends the intake at once; the job in progress feeds the engine
no further input, and its videos in flight finish and are stored. ``close(timeout_s)`` waits
that long for them, then cancels the rest (scored again on the next start, where every job
not done carries on).
"""
from __future__ import annotations

import os
import secrets
import shutil
import sys
import threading
import time
from concurrent.futures import CancelledError, Future
from typing import Any

from vqa.errors import UsageError
from vqa.spool import shown_as
from vqa.inputs import Input

from . import engine
from .errors import Busy
from .log import ServeLog
from .jobs import DONE, QUEUED, RUNNING, JobDB
from .callbacks import CallbackRule, Callbacks
from .metrics import Metrics
from .paths import Roots
from .pools import Bounded
from .settings import ServeSettings
from .uploads import Upload

RESULTS_DB, JOBS_DB, UPLOADS = "results.vqa.db", "jobs.db", "uploads"
ONE_PREFIX, JOB_PREFIX = "one-", "job-"  # upload folders: a single upload's, a job's


class Service:
    def __init__(self, settings: ServeSettings, log: ServeLog | None = None):
        self.settings = settings.checked()
        self.log = log or ServeLog(settings.log_format)
        self.roots = Roots(settings.roots)
        self.metrics = Metrics()
        self.reports = Bounded(settings.report_workers, "vqa-serve-report", "reports")
        self.callback_rule = CallbackRule(settings.callback_hosts, settings.callback_secret)
        self.data = settings.data_dir
        os.makedirs(self.data, mode=0o700, exist_ok=True)  # a folder given that exists keeps its mode
        os.makedirs(os.path.join(self.data, UPLOADS), mode=0o700, exist_ok=True)
        os.chmod(os.path.join(self.data, UPLOADS), 0o700)  # ours: private whatever the umask
        self.db = JobDB(os.path.join(self.data, JOBS_DB))
        self.db.requeue_running()
        self.callbacks = Callbacks(self.callback_rule, self.log, self.db.delivered)
        for job_id, url in self.db.undelivered():  # calls a stopped server had still to make
            job = self.db.job(job_id)
            if job is not None:
                self.callbacks.add(url, job)
        self._lock = threading.RLock()  # reentrant: deleting a job releases its place under it
        self._wake = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._stopped_at = 0.0
        self._closed = False
        self._cancelled: set[str] = set()
        self.current: str | None = None
        self.unfinished_jobs = len(self.db.unfinished())
        self.pending_videos = sum(len(self.db.pending(j)) for j in self.db.unfinished())
        self.uploads_in_flight = 0
        self.progress = 0  # bumped on every job record: record readers poll it, not the database
        try:
            self._clean_uploads()
            engine.check_results(os.path.join(self.data, RESULTS_DB))
            self.scorer = engine.open_engine(settings.options, settings.engine, settings.actors_per_node)
        except BaseException:
            self.db.close()
            raise
        self._thread = threading.Thread(target=self._loop, name="vqa-serve-jobs", daemon=True)
        self._thread.start()

    # -- requests (any thread) -------------------------------------------------------------

    def submit_paths(self, paths: list[str], patterns: list[str] | None = None,
                     callback_url: str | None = None) -> dict[str, Any]:
        if callback_url is not None:
            self.callback_rule.check(callback_url)  # 400 before a place is taken
        self.admit_job()
        try:
            inputs = self.roots.resolve(paths, patterns=patterns, limit=self.settings.max_inputs)  # 403, 413
            if not inputs:  # as vqa score: E_USAGE, not an empty job
                raise UsageError("no video files to score in the paths given")
            return self._add(inputs=[(i, None) for i in inputs], kind="paths", callback=callback_url)
        except BaseException:
            self.release_job()
            raise

    def new_upload_folder(self, kind: str) -> str:
        return _private_folder(os.path.join(self.data, UPLOADS), kind)

    def add_upload_job(self, folder: str, uploads: list[Upload]) -> dict[str, Any]:
        """A job over files just received into ``folder`` (from ``new_upload_folder``), after
        ``admit_job``."""
        return self._add(inputs=[(Input(u.path), u.name) for u in uploads], kind="upload", folder=folder)

    def _add(self, *, inputs, kind: str, folder: str | None = None, callback: str | None = None) -> dict[str, Any]:
        job_id = secrets.token_hex(12)
        if folder is not None:
            base = os.path.join(os.path.dirname(folder), JOB_PREFIX + job_id)
            os.rename(folder, base)
            inputs = [(Input(os.path.join(base, os.path.basename(i.path))), name) for i, name in inputs]
        try:
            self.db.add(job_id, kind, inputs, callback)
        except BaseException:
            if folder is not None:  # renamed: the caller's cleanup knows only the old name
                shutil.rmtree(base, ignore_errors=True)
            raise
        with self._wake:
            self.pending_videos += len(inputs)
            self._wake.notify_all()
        self.log.event("job", job=job_id, state="submitted", kind=kind, total=len(inputs))
        return {"id": job_id, "state": QUEUED, "total": len(inputs)}

    def admit_job(self) -> None:
        with self._lock:
            if self._stop.is_set():
                raise Busy("the server is stopping", 30)
            if self.unfinished_jobs >= self.settings.queue_jobs:
                raise Busy(f"{self.unfinished_jobs} jobs are queued or running, the most this server takes "
                           f"(--queue-jobs {self.settings.queue_jobs})", self._retry_after(self.pending_videos))
            self.unfinished_jobs += 1

    def release_job(self, videos_left: int = 0) -> None:
        with self._lock:
            self.unfinished_jobs -= 1
            self.pending_videos -= videos_left

    def job(self, job_id: str) -> dict[str, Any] | None:
        """A job as the API shows it: one being deleted (its videos in flight still finishing)
        is gone already."""
        return None if job_id in self._cancelled else self.db.job(job_id)

    def jobs(self) -> list[dict[str, Any]]:
        return [job for job in self.db.jobs() if job["id"] not in self._cancelled]

    def delete(self, job_id: str) -> bool:
        """Forget a job and its records; a running one stops after its videos in flight."""
        job = self.job(job_id)
        if job is None:
            return False
        with self._lock:  # the jobs thread takes its next job, and lets it go, under this lock too
            if self.current == job_id:
                self._cancelled.add(job_id)
            else:
                now = self.db.job(job_id)  # its state now: it may have finished since
                if now is None:
                    return False
                self._forget(job_id, now)
        return True

    def _forget(self, job_id: str, job: dict[str, Any]) -> None:
        left = len(self.db.pending(job_id)) if job["state"] != DONE else 0
        if self.db.delete(job_id) and job["state"] != DONE:
            self.release_job(left)
        shutil.rmtree(os.path.join(self.data, UPLOADS, JOB_PREFIX + job_id), ignore_errors=True)

    def admit_upload(self) -> None:
        """Take a place for one single upload (Busy when none is free); ``release_upload``
        gives it back when its request ends."""
        with self._lock:
            if self._stop.is_set():
                raise Busy("the server is stopping", 30)
            if self.uploads_in_flight >= self.settings.queue_uploads:
                raise Busy(f"{self.uploads_in_flight} uploads are being scored, the most this server takes "
                           f"(--queue-uploads {self.settings.queue_uploads})",
                           self._retry_after(self.uploads_in_flight))
            self.uploads_in_flight += 1

    def release_upload(self) -> None:
        with self._lock:
            self.uploads_in_flight -= 1

    def score_upload(self, path: str, name: str) -> Future:
        """Score one received file; the Future's result is its record (path: ``name``)."""
        out: Future = Future()
        inner = engine.submit(self.scorer, path, self.metrics.observe)

        def done(f: Future) -> None:
            if f.cancelled():
                out.cancel()
            elif f.exception() is not None:
                out.set_exception(f.exception())
            else:
                record = named(engine.record_of(f.result()), path, name)
                self.metrics.record(record, "upload")
                out.set_result(record)
        inner.add_done_callback(done)
        out.add_done_callback(lambda f: f.cancelled() and inner.cancel())  # the client went away
        return out

    def _retry_after(self, videos: int) -> int:
        workers = max(1, self.scorer.workers)
        return int(min(3600, max(1, self.metrics.mean_s() * videos / workers + 0.999)))

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def describe(self) -> dict[str, Any]:
        """What the ready line says the server runs with."""
        model = getattr(self.scorer, "model", None) or {}
        options = self.settings.options
        return {"model": model.get("name", "?") if isinstance(model, dict) else str(model),
                "backend": options.backend, "engine": self.settings.engine, "workers": self.scorer.workers,
                "roots": len(self.roots.given),
                "token": self.settings.token is not None}

    def health(self) -> dict[str, Any]:
        state = engine.health(self.scorer)
        state["jobs_thread_alive"] = self._thread.is_alive()
        state["ok"] = state["ok"] and state["jobs_thread_alive"] and not self._stop.is_set()
        return state

    def gauges(self) -> dict:
        def health() -> dict:
            return engine.health(self.scorer)
        return {
            "vqa_queue_jobs": ("Jobs queued or running", lambda: {"": self.unfinished_jobs}),
            "vqa_queue_videos": ("Videos of queued or running jobs still without a record",
                                 lambda: {"": self.pending_videos}),
            "vqa_uploads_in_flight": ("Single uploads being scored", lambda: {"": self.uploads_in_flight}),
            "vqa_model_loaded": ("1 when the model is loaded", lambda: {"": int(health()["model_loaded"])}),
            "vqa_workers_alive": ("Decode workers alive", lambda: {"": health()["workers_alive"]}),
        }

    # -- the jobs thread -------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                queued = self.db.queued()
                if not queued:
                    self._wake.wait(1.0)
                    continue
                self.current = queued[0]
            try:
                self._run(queued[0])
            except Exception as e:  # noqa: BLE001 - a job's failure must not end the service
                print(f"vqa serve: job {queued[0]} stopped: {type(e).__name__}: {e}; it stays queued",
                      file=sys.stderr, flush=True)
                self.db.set_state(queued[0], QUEUED)
                self._stop.wait(5.0)
            finally:
                with self._lock:
                    self.current = None
                    if queued[0] in self._cancelled:  # deleted as it finished: forgotten now
                        finished = self.db.job(queued[0])
                        if finished is not None:
                            self._forget(queued[0], finished)
                        self._cancelled.discard(queued[0])

    def _run(self, job_id: str) -> None:
        job = self.db.job(job_id)
        if job is None:
            return
        self.db.set_state(job_id, RUNNING)
        pending = self.db.pending(job_id)
        started = time.monotonic()
        self.log.event("job", job=job_id, state="started", total=job["total"], pending=len(pending))
        order = iter(pending)

        def on_outcome(outcome) -> None:  # in input order, once stored
            item = next(order)
            record = named(outcome.record, item.input.path, item.name) if item.name else outcome.record
            self.db.put_record(job_id, item.seq, record)
            self.metrics.record(record, "job")
            with self._lock:
                self.pending_videos -= 1
            self.progress += 1

        # Jobs by path share the results store (a file scored once is not scored again);
        # a job of uploads keeps its own beside the files, and it goes with them.
        store = (os.path.join(self.data, RESULTS_DB) if job["kind"] == "paths"
                 else os.path.join(self.data, UPLOADS, JOB_PREFIX + job_id, RESULTS_DB))
        if pending:
            try:
                engine.run(self.scorer, self.settings.options, [item.input for item in pending], store=store,
                           observe=self.metrics.observe, on_outcome=on_outcome,
                           stopped=lambda: self._stop.is_set() or job_id in self._cancelled)
            except CancelledError:  # stopped: the videos in flight are stored, the rest wait
                pass
        if job_id in self._cancelled:
            with self._lock:  # forgotten before it is visible again (job() hides it until then)
                self._forget(job_id, {**job, "state": RUNNING})
                self._cancelled.discard(job_id)
        elif not self.db.pending(job_id):
            self.db.set_state(job_id, DONE)
            done = self.db.job(job_id) or job
            self.log.event("job", job=job_id, state="finished", total=done["total"], ok=done.get("ok"),
                           failed=done.get("failed"), seconds=round(time.monotonic() - started, 3))
            callback = self.db.callback(job_id)
            if callback is not None:
                self.callbacks.add(callback, done)
            self.release_job(0)
            shutil.rmtree(os.path.join(self.data, UPLOADS, JOB_PREFIX + job_id), ignore_errors=True)
        else:
            self.db.set_state(job_id, QUEUED)  # stopped: the next start carries on
            self.log.event("job", job=job_id, state="stopped", left=len(self.db.pending(job_id)))
        self.progress += 1

    # -- start and stop --------------------------------------------------------------------

    def _clean_uploads(self) -> None:
        """Single uploads a killed server left behind, and the folders of jobs that are gone."""
        keep = {JOB_PREFIX + j for j in self.db.unfinished()}
        folder = os.path.join(self.data, UPLOADS)
        for name in os.listdir(folder):
            if name not in keep:
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)

    def stop(self) -> None:
        """Take no more work: the running job stops after its videos in flight."""
        if not self._stop.is_set():
            self._stopped_at = time.monotonic()
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    def close(self, timeout_s: float | None = None) -> None:
        """Stop, wait up to ``timeout_s`` for the videos in flight, then cancel what is left."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        timeout_s = self.settings.drain_timeout_s if timeout_s is None else timeout_s
        self._thread.join(max(0.0, self._stopped_at + timeout_s - time.monotonic()))
        try:
            self.scorer.close()  # cancels whatever is still in flight
        finally:
            self._thread.join()
            self.reports.close()
            self.callbacks.close()
            self.db.close()  # checkpointed: jobs.db alone is then the whole store


def named(record: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    """An upload's record shows the client's name, not the private file's path (the rule of
    ``Scorer.submit(data, name=...)``)."""
    return shown_as(record, path, name)


def _private_folder(parent: str, kind: str) -> str:
    import tempfile
    return tempfile.mkdtemp(prefix=kind, dir=parent)  # mode 0700
