"""``vqa score``: flags -> ScoreOptions and a FolderJob (vqa.job); progress, signals, exit status."""
from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import ExitStack, contextmanager

import click

from vqa.cli.common import (EXIT_CODES_HELP, EXIT_INTERNAL, EXIT_OK, EXIT_SIGINT, EXIT_SIGPIPE, EXIT_SIGTERM,
                            EXIT_SOME_FAILED,
                            EXIT_USAGE, debug, fail, score_options)
from vqa.codes import ErrorCode
from vqa.cli.report import write_html
from vqa.config import ENGINES, ScoreOptions
from vqa.errors import VQAError
from vqa.inputs import VIDEO_EXTENSIONS
from vqa.job import SCORED, STORED, FolderJob, Outcome
from vqa.report import FORMATS
from vqa.words import counted


def _make_scorer(options: ScoreOptions, **engine):
    # Imported here so `vqa --help` works without loading the model stack (or Ray).
    from vqa.scorer.by_engine import open_scorer
    return open_scorer(options, **engine)


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format. Default: table on a terminal, jsonl when piped or "
                   "with --output. json is one array written as results arrive; jsonl and csv add each record "
                   "as it is scored.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              help="Write results to FILE instead of stdout ('-' is stdout). With a file, the job "
                   "is resumable: see --db.")
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="Job store (SQLite) that makes the job resumable. Default: OUTPUT.vqa.db beside "
                   "--output; none when writing to stdout. Re-running the same command skips the "
                   "videos it holds (same path, size, mtime, model and options) and rewrites the "
                   "output in full.")
@click.option("--retry-failed", is_flag=True,
              help="On resume, score again the videos whose stored record is an error.")
@click.option("--glob", "patterns", multiple=True, metavar="PATTERN",
              help="File-name pattern for searching folders, repeatable, e.g. --glob '*.mp4' "
                   "(case-insensitive). Default: the video extensions listed above.")
@click.option("--fail-fast", is_flag=True, help="Stop at the first video that fails (after writing its record).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary on stderr.")
@score_options
@click.option("--report", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write an HTML report of this run to FILE (implies --timeline); see vqa report.")
@click.option("--thumbnails", type=click.IntRange(min=0), default=50, show_default=True,
              help="With --report: thumbnails for the N lowest-scoring videos (0: none).")
@click.option("--engine", type=click.Choice(ENGINES), default="local", show_default=True,
              help="local: this machine. ray: one actor per node of a Ray cluster (RAY_ADDRESS=auto "
                   "joins the one `ray start` made; none: a local one is started), same records and "
                   "job store; --workers and --threads are then per actor. Needs: pip install '.[ray]' "
                   "in vqa's checkout")
@click.option("--actors-per-node", type=click.IntRange(min=1), default=None,
              help="With --engine ray: actors on each node, sharing its CPUs (default 1).")
def score(paths, fmt, output, db, retry_failed, patterns, fail_fast, quiet, report, thumbnails, engine,
          actors_per_node, **option_values):
    """Score each video in PATHS (files, or folders searched recursively).

    Folders are searched for video extensions ({extensions}) in sorted order;
    symlinked subfolders are not followed, and a linked file that leads outside its
    folder gets E_BAD_PATH. Every input gets exactly one
    record, including paths that do not exist (E_NOT_FOUND).

    A progress bar shows on stderr when it is a terminal, and a one-line summary
    on stderr ends every run (--quiet drops both). With --output, the job is
    resumable: run the same command again after any interruption.
    """
    if report is not None:
        option_values["timeline"] = True  # the report's timelines need it
    options = ScoreOptions(**option_values)
    # An interrupted job has its own status, not 1 ("some videos failed"): 130 or 143. The
    # handlers are put back afterwards, for a caller that runs the command in-process.
    _stopping.clear()
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _score(paths, options, fmt=fmt, output=output, db=db, retry_failed=retry_failed, patterns=patterns,
               fail_fast=fail_fast, quiet=quiet, report=report, thumbnails=thumbnails, engine=engine,
               actors_per_node=actors_per_node)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# The extensions a folder walk takes, from the one list (vqa.inputs.VIDEO_EXTENSIONS).
score.help = (score.help or "").replace("{extensions}", " ".join(sorted(VIDEO_EXTENSIONS)))


def _score(paths, options: ScoreOptions, *, fmt, output, db, retry_failed, patterns, fail_fast, quiet, report,
           thumbnails, engine, actors_per_node):
    started = time.monotonic()  # the summary's time is the command's, start-up included
    to_file = output not in (None, "-")
    if fmt is None:
        fmt = "table" if not to_file and sys.stdout.isatty() else "jsonl"
    engine_options = {} if engine == "local" else {"engine": engine}
    if actors_per_node is not None:
        engine_options["actors_per_node"] = actors_per_node
    try:
        job = FolderJob(paths, options, output=output, fmt=fmt, db=db, retry_failed=retry_failed,
                        patterns=patterns, fail_fast=fail_fast, report=report, engine=engine_options,
                        warn=lambda m: click.echo(f"warning: {m}", err=True), make_scorer=_make_scorer)
        if engine == "local" and actors_per_node is not None:
            fail(ErrorCode.E_USAGE, "--actors-per-node needs --engine ray", EXIT_USAGE)
        options.validate()  # before the job store is made
        # Said once, here: the split is this machine's (Ray actors plan their own nodes).
        split_warning = options.resolve().split_warning if engine == "local" else None
    except VQAError as e:
        fail(e.code, e.message, EXIT_USAGE)
    if split_warning:
        click.echo(f"warning: {split_warning}", err=True)
    collected: list[dict] | None = [] if report is not None else None
    with ExitStack() as stack:
        try:
            job.start(stack)
        except VQAError as e:
            _stop_if_asked()  # not a usage error: the command was stopped while it started
            if debug():
                raise
            fail(e.code, e.message, EXIT_USAGE)
        tally = Tally(len(job.inputs), with_store=job.store is not None, started=started)
        # Progress only where a person watches stderr and the results are not on that screen.
        show_progress = not quiet and sys.stderr.isatty() and (to_file or not sys.stdout.isatty())
        progress = stack.enter_context(_progress(len(job.inputs), show_progress))
        try:
            _stop_if_asked()
            for outcome in job.run():
                _stop_if_asked()
                if collected is not None:
                    collected.append(outcome.record)
                tally.add(outcome)
                # The counts first: update() draws the bar, and must draw this video's.
                progress.set_postfix_str(tally.postfix(), refresh=False)
                progress.update(1)
        except BrokenPipeError:
            # The reader went away (`vqa score ... | head`): stop without a traceback, with the
            # status a shell shows for a tool SIGPIPE stopped (141), never 0: the rest is unwritten.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            progress.close()
            if not quiet:
                click.echo(tally.summary(stopped=True).replace("interrupted", "the output's reader went away", 1),
                           err=True)
            sys.exit(EXIT_SIGPIPE)
        except SystemExit as e:
            if e.code in (EXIT_SIGINT, EXIT_SIGTERM) and not quiet:
                progress.close()
                # Only a job store makes a re-run resume: without one (stdout, a FIFO) it starts over.
                resume = "; run the same command to resume" if job.store is not None else ""
                click.echo(tally.summary(stopped=True) + resume, err=True)
            raise
        except Exception as e:  # noqa: BLE001 - one clean line unless debugging
            if debug():
                raise
            fail(e.code if isinstance(e, VQAError) else ErrorCode.E_INTERNAL, str(e), EXIT_INTERNAL)
        progress.close()
        if not quiet:
            click.echo(tally.summary(), err=True)
        if report is not None:
            try:
                write_html(collected, report, thumbnails=thumbnails, quiet=quiet, source="vqa score")
            except VQAError as e:  # another job writes it, or it is no file to write
                fail(e.code, e.message, EXIT_USAGE)
            except OSError as e:
                fail(ErrorCode.E_OUTPUT, f"cannot write {report}: {e.strerror}", EXIT_INTERNAL)
    sys.exit(EXIT_SOME_FAILED if tally.failed else EXIT_OK)


_stopping: list[int] = []  # the signals that asked this command to stop


def _terminate(signum, _frame):
    # SIGTERM (a scheduler stopping the job) and Ctrl-C unwind the same way: workers stop,
    # shared memory goes, the output is put in place; the status is 128 + the signal.
    _stopping.append(signum)
    raise SystemExit(128 + signum)


def _stop_if_asked() -> None:
    """Raise the stop again where a library swallowed it: raised inside a native module's
    import, it became an ImportError (read as a missing package), or was only printed."""
    if _stopping:
        raise SystemExit(128 + _stopping[0])


class Tally:
    """Counts for the progress bar and the closing summary."""

    def __init__(self, total: int, with_store: bool = False, started: float | None = None):
        self.total, self.ok, self.failed, self.stored = total, 0, 0, 0
        self.decoded = 0  # scored now with frames decoded: the work a rate is measured over
        self.with_store = with_store
        self.started = time.monotonic() if started is None else started

    def add(self, outcome: Outcome) -> None:
        self.ok += outcome.ok
        self.failed += not outcome.ok
        self.stored += outcome.source == STORED
        frames = outcome.record.get("frames") if isinstance(outcome.record, dict) else None
        self.decoded += outcome.source == SCORED and bool((frames or {}).get("decoded"))

    def postfix(self) -> str:
        stored = f" stored={self.stored}" if self.with_store else ""
        return f"ok={self.ok} failed={self.failed}{stored}"

    def summary(self, stopped: bool = False) -> str:
        """E.g. "vqa: 50 videos: 43 ok, 7 failed; 40 from the job store, 10 processed in 3.1 s,
        193.5 videos/min". ok + failed are all the videos; from the store + processed too.
        The time is the command's, start-up included; the rate counts only the videos whose
        frames were decoded now (none: no rate), so a run of failed checks claims no speed."""
        elapsed = time.monotonic() - self.started
        done = self.ok + self.failed
        processed = done - self.stored  # scored now, or failed their checks now
        head = (f"{done} of {counted(self.total, 'video')}" if done < self.total or stopped
                else counted(done, "video"))
        text = f"vqa: {'interrupted, ' if stopped else ''}{head}: {self.ok} ok, {self.failed} failed; "
        if self.with_store:
            text += f"{self.stored} from the job store, "
        text += f"{processed} processed in {elapsed:.1f} s"
        if self.decoded and elapsed > 0:
            text += f", {self.decoded / elapsed * 60:.1f} videos/min"
        return text


class _NoProgress:
    def update(self, n: int) -> None: ...
    def set_postfix_str(self, s: str, refresh: bool = True) -> None: ...
    def close(self) -> None: ...


@contextmanager
def _progress(total: int, enabled: bool):
    if not enabled:
        yield _NoProgress()
        return
    from tqdm import tqdm  # count, rate and ETA, redrawn in place on stderr
    try:
        sized = os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except OSError:
        sized = False
    # A terminal that reports no size (some containers' ptys) hides tqdm's bar: assume 80x24.
    sizes = {"dynamic_ncols": True} if sized else {"ncols": 80, "nrows": 24}
    bar = tqdm(total=total, unit="video", file=sys.stderr, smoothing=0.1, **sizes)
    try:
        yield bar
    finally:
        bar.close()
