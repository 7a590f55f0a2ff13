"""A batch job: every input ends with exactly one record, in input order, and a job store
(vqa.jobstore) lets a re-run skip what an earlier, possibly killed, run already finished.

    inputs (vqa.inputs) -> [job store hit | path check failed | Scorer.submit] -> Outcome

``run_job`` is that loop over any ``ScorerLike``; ``FolderJob`` (and ``run_folder_job`` for
scripts) is the whole job ``vqa score`` runs: expand the paths, refuse colliding files, open
the store, the scorer and the output (written whole, atomically), write each record, resume.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from vqa import outputs
from vqa.config import ScoreOptions
from vqa.errors import OutputError, UsageError
from vqa.inputs import Input, expand_inputs
from vqa.jobstore import Identity, JobStore, config_key, default_db_path
from vqa.outputs import TextSink
from vqa.report import open_writer
from vqa.types import VideoScore

SCORED, STORED, CHECKED = "scored", "stored", "checked"
LOOKAHEAD_PER_WORKER = 4  # inputs started ahead of the outcomes yielded, per decode worker


@dataclass(frozen=True)
class Outcome:
    record: dict[str, Any]  # VideoScore.to_dict(): the output contract
    source: str  # SCORED now, STORED by an earlier run, or CHECKED (failed before scoring)

    @property
    def ok(self) -> bool:
        return self.record["status"] == "ok"


@runtime_checkable
class ScorerLike(Protocol):
    """What a job drives: ``vqa.Scorer``, ``vqa.scorer.ray.RayScorer``, and the tests' fake.

    ``model`` and ``config`` are each record's ``model`` and ``config`` blocks (and make the
    job store's key); ``workers`` sizes the look-ahead."""

    model: dict[str, Any]
    config: dict[str, Any]

    @property
    def workers(self) -> int: ...

    def submit(self, path: str, split: bool = False) -> Future: ...

    def close(self) -> None: ...

    def __enter__(self) -> ScorerLike: ...

    def __exit__(self, *exc: object) -> None: ...


def run_job(scorer: ScorerLike, inputs: Iterable[Input | str], *, store: JobStore | None = None,
            retry_failed: bool = False,
            model: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> Iterator[Outcome]:
    """Yield one Outcome per input, in order. Each new record is committed to ``store``
    before it is yielded, so whatever the caller has written is also stored.

    ``inputs`` is read lazily: each is checked against the store and handed to
    ``scorer.submit`` when its turn comes, a bounded number ahead of the outcomes yielded,
    so the first outcome comes before a long input is read. ``model`` and ``config`` (what
    keys a stored record) default to the scorer's own."""
    model = dict(scorer.model) if model is None else model
    config = dict(scorer.config) if config is None else config
    key = config_key(model, config)
    workers = max(1, scorer.workers)
    lookahead = LOOKAHEAD_PER_WORKER * workers
    # As score_many does: a job of fewer videos than workers spreads each over all of them.
    split = isinstance(inputs, (list, tuple)) and len(inputs) < workers

    def start(item: Input) -> tuple[str, Input, Any]:
        if item.error is not None:
            code, message = item.error
            record = VideoScore(path=item.path, status="error", model=dict(model), config=dict(config),
                                error={"code": code, "message": message})
            return CHECKED, item, record.to_dict()
        identity = Identity.of(item.path) if store is not None else None
        status = store.status(identity, key) if store is not None and identity is not None else None
        if status is not None and (status == "ok" or not retry_failed):
            return STORED, item, identity  # the record is read when its turn comes
        return SCORED, item, (identity, scorer.submit(item.path, split=True) if split else scorer.submit(item.path))

    def finish(kind: str, item: Input, value) -> Outcome:
        if kind == CHECKED:
            return Outcome(value, kind)
        if kind == STORED:
            assert store is not None  # only a store gives STORED
            record = store.get(value, key)
            assert record is not None  # its status was just read
            return Outcome(record, kind)
        identity, future = value
        result = future.result()
        record = result.to_dict()
        if store is not None:
            # Keyed on the file the decoder opened, when the record says: a file replaced since
            # the lookup is stored as what was scored, not under the identity it had before.
            identity = Identity.of_opened(item.path, result.video) or identity
            if identity is not None:
                store.put(identity, key, record)
        return Outcome(record, SCORED)

    ahead: deque[tuple[str, Input, Any]] = deque()
    try:
        for item in inputs:
            ahead.append(start(item if isinstance(item, Input) else Input(item)))
            # The head goes out as soon as it can without waiting, or when the window is full.
            while ahead and (ahead[0][0] != SCORED or ahead[0][2][1].done() or len(ahead) >= lookahead):
                yield _taken(ahead, finish)
        while ahead:
            yield _taken(ahead, finish)
    finally:
        for kind, _item, value in ahead:  # stopped early (--fail-fast, Ctrl-C): stop their work
            if kind == SCORED:
                value[1].cancel()


def _taken(ahead: deque, finish) -> Outcome:
    """The head's outcome, taken off only once it is there: Ctrl-C (or any exception) while its
    video is awaited leaves it in ``ahead``, where run_job cancels it with the rest."""
    outcome = finish(*ahead[0])
    ahead.popleft()
    return outcome


def report_collision(report: str, written: list[str | None], inputs) -> str | None:
    """Why an HTML report at ``report`` cannot be written: it is the output, the job store,
    or an input."""
    key = outputs.file_key(report)
    for other in written:
        if other is not None and outputs.file_key(other) == key:
            return f"--report {report} is the same file as {other}; give it another path"
    if key[0] == "inode":
        for item in inputs:
            if outputs.file_key(getattr(item, "path", item)) == key:
                return f"--report {report} is also an input: writing it would destroy it"
    return None


def _open_scorer(options: ScoreOptions, **engine: Any) -> ScorerLike:
    from vqa.scorer.by_engine import open_scorer  # the model stack (and Ray) only when a job runs
    return open_scorer(options, **engine)


class FolderJob:
    """One ``vqa score`` job, for the CLI and for scripts alike.

    Made in three steps, so a caller can tell the failures apart (the CLI's exit statuses):

    1. ``FolderJob(paths, options, ...)``: expand the paths and refuse an output, job store
       or report that is the same file as another or as an input. UsageError; nothing is
       written or loaded yet.
    2. ``job.start(stack)``: open the job store, the scorer (model and workers) and the output
       on ``stack`` (a ``contextlib.ExitStack``). VQAError from the store or the scorer;
       UsageError when the output cannot be opened. No inputs: no scorer (``scorer`` stays
       None), so a job with nothing to do loads no model and starts no worker.
    3. ``job.run()``: one Outcome per input, in order, each written to the output (and the
       store) before it is yielded; the writer is closed at the end. OutputError when the
       output cannot be written; the job store holds every record yielded so far.

    The output file is written beside itself and renamed over it when the run ends, also
    when it ends early (vqa.outputs.open_output), so it is only ever replaced whole.
    """

    def __init__(self, paths: Iterable[str | Input], options: ScoreOptions, *, output: str | None = None,
                 fmt: str = "jsonl", db: str | None = None, retry_failed: bool = False,
                 patterns: Iterable[str] = (), fail_fast: bool = False, report: str | None = None,
                 engine: dict[str, Any] | None = None, warn: Callable[[str], None] | None = None,
                 make_scorer: Callable[..., ScorerLike] = _open_scorer):
        self.options, self.fmt, self.retry_failed, self.fail_fast = options, fmt, retry_failed, fail_fast
        for name, path in (("--output", output), ("--db", db), ("--report", report)):
            if path is not None and not str(path).strip():
                stdout = " ('-' for stdout)" if name == "--output" else ""
                raise UsageError(f"{name} is empty: give a file name{stdout}")
        self.output = output if output not in (None, "-") else None  # None: stdout
        # No videos at all (an empty upload folder) is a job with nothing to do, not a mistake:
        # the output is written empty (the format's empty document).
        self.inputs = expand_inputs(paths, patterns=patterns, warn=warn or (lambda _message: None))
        # A name vqa makes (never a link), beside an output that is a file: a device, a FIFO or a
        # descriptor (/dev/stdout) has nothing to resume, and /dev is no place for a store.
        self._derived_db = db is None and self.output is not None and not outputs.is_stream(self.output)
        self.db = default_db_path(self.output) if self._derived_db and self.output is not None else db
        collision = outputs.collision(self.output, self.db, self.inputs)
        if collision is None and report is not None:
            collision = report_collision(report, [self.output, self.db], self.inputs)
        if collision:  # before anything is written
            raise UsageError(collision)
        self._engine, self._make_scorer = dict(engine or {}), make_scorer
        self.store: JobStore | None = None
        self.scorer: ScorerLike | None = None
        self._stream: TextSink | None = None
        self._output = ExitStack()  # the output file: put in place by run(), where a failure is E_OUTPUT
        self._started = False

    def start(self, stack: ExitStack) -> None:
        self.store = stack.enter_context(JobStore(self.db, follow_links=not self._derived_db)) if self.db else None
        if self.inputs:  # nothing to score: no model to load, no worker to start
            self.scorer = stack.enter_context(self._make_scorer(self.options, **self._engine))
        try:
            self._stream = self._output.enter_context(outputs.open_output(self.output))
            stack.enter_context(self._output)  # a run that stops early puts it in place here
        except OSError as e:
            raise UsageError(f"cannot write {self.output}: {e.strerror}") from None
        self._started = True

    def run(self) -> Iterator[Outcome]:
        if not self._started:
            raise RuntimeError("FolderJob.run() before start()")
        width = max((len(i.path) for i in self.inputs), default=0)
        outcomes = () if self.scorer is None else run_job(self.scorer, self.inputs, store=self.store,
                                                          retry_failed=self.retry_failed)
        try:
            with self._guard(open_writer, self.fmt, self._stream, path_width=width) as writer:  # CSV's header now
                for outcome in outcomes:
                    self._guard(writer.write, outcome.record)
                    yield outcome
                    if self.fail_fast and not outcome.ok:
                        break
                self._guard(writer.close)  # a full disk shows here, not at exit
        except OutputError as e:
            # The output is put in place knowing why the run stopped: a full disk must not swap
            # a larger earlier output for this run's few records (vqa.outputs.open_destination).
            with suppress(OutputError):
                self._output.__exit__(type(e), e, e.__traceback__)
            raise
        # Renamed into place here, not when the caller's stack unwinds: a folder removed (or
        # made read-only) under the output is E_OUTPUT like a full disk, before any summary.
        self._guard(self._output.close)

    def _guard(self, write, *args, **kwargs):
        """``write(*args, **kwargs)``; a failing disk or file system becomes one E_OUTPUT error."""
        try:
            return write(*args, **kwargs)
        except BrokenPipeError:
            raise
        except OSError as e:
            kept = "; every record so far is in the job store: re-run to resume" if self.store else ""
            raise OutputError(f"cannot write {self.output or 'stdout'}: {e.strerror}{kept}") from None


@dataclass(frozen=True)
class JobSummary:
    ok: int
    failed: int
    stored: int  # taken from the job store, not scored again


def run_folder_job(paths: Iterable[str | os.PathLike | Input], options: ScoreOptions | None = None, *,
                   output: str | None = None, on_outcome: Callable[[Outcome], None] | None = None,
                   **job: Any) -> JobSummary:
    """Run a whole folder job as ``vqa score`` does, from a script: the same expansion,
    collision checks, job store (resume), atomic output and records.

    >>> run_folder_job(["videos/"], ScoreOptions(frames="all"), output="scores.jsonl")  # doctest: +SKIP
    JobSummary(ok=41, failed=2, stored=0)

    ``paths`` may also hold ``vqa.inputs.Input``s, expanded and checked already (a service's
    stored job): they are taken as they are. ``job``: FolderJob's other keywords (fmt, db,
    retry_failed, patterns, fail_fast, engine, warn, make_scorer). Raises what FolderJob raises."""
    folder = FolderJob([p if isinstance(p, Input) else os.fspath(p) for p in paths], options or ScoreOptions(),
                       output=output, **job)
    ok = failed = stored = 0
    with ExitStack() as stack:
        folder.start(stack)
        for outcome in folder.run():
            ok, failed, stored = ok + outcome.ok, failed + (not outcome.ok), stored + (outcome.source == STORED)
            if on_outcome is not None:
                on_outcome(outcome)
    return JobSummary(ok, failed, stored)
