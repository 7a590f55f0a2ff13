"""The ``vqa`` command: parse options, expand inputs, then drive ``vqa.Scorer`` and a report writer.

The only module that imports click. It stays thin: everything it does to a video goes
through the library, so a script can do the same without the CLI.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import ExitStack, contextmanager

import click

from vqa import outputs
from vqa.errors import OutputError, UsageError, VQAError
from vqa.inputs import expand_inputs
from vqa.job import STORED, Outcome, run_job
from vqa.jobstore import JobStore, default_db_path
from vqa.cli_report import report as report_command
from vqa.cli_report import report_collision, write_html
from vqa.report import FORMATS, open_writer

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM  # 130, 143: interrupted

EXIT_CODES_HELP = """\b
Exit status:
  0  every video was scored
  1  some videos failed; each still has a record with status "error"
  2  usage error: bad option, missing model or backend (nothing scored)
  3  the run stopped early: an internal error, or the output or the job
     store could not be written (E_OUTPUT); records so far are valid and in
     the job store
  130, 143  interrupted by Ctrl-C (SIGINT) or SIGTERM; records so far are
     written and stored: run the same command again to resume
Set VQA_DEBUG=1 to see the traceback instead of a one-line error."""


def _debug() -> bool:
    return os.environ.get("VQA_DEBUG", "") not in ("", "0")


def _make_scorer(**options):
    # Imported here so `vqa --help` works without loading the model stack (or Ray).
    from vqa import open_scorer
    return open_scorer(**options)


class FramesType(click.ParamType):
    name = "default|all|N"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            text = str(value).strip().lower()
            if text in ("default", "all"):
                return text
            try:
                n = int(text)
            except ValueError:
                self.fail(f"{value!r} is not 'default', 'all' or a whole number of frames", param, ctx)
        if n < 1:
            self.fail(f"frame count must be at least 1, got {n}", param, ctx)
        return n


class BatchSizeType(click.ParamType):
    name = "auto|N"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if text == "auto":
            return text
        try:
            n = int(text)
        except ValueError:
            self.fail(f"{value!r} is not 'auto' or a whole number", param, ctx)
        if not 1 <= n <= 256:
            self.fail(f"batch size must be in 1..256, got {n}", param, ctx)
        return n


def _print_version(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    import vqa
    version = getattr(vqa, "__version__", None)
    if version is None:
        from importlib.metadata import PackageNotFoundError, version as dist_version
        try:
            version = dist_version("vqa")
        except PackageNotFoundError:
            version = "unknown (not installed)"
    click.echo(f"vqa {version}")
    ctx.exit(0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
def cli():
    """No-reference video quality assessment: a 0-100 score that predicts VMAF,
    a quality category and timestamped defects."""


class TimeoutType(click.ParamType):
    name = "auto|SECONDS"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if text == "auto":
            return text
        try:
            seconds = float(text)
        except ValueError:
            self.fail(f"{value!r} is not 'auto' or a number of seconds", param, ctx)
        if not seconds >= 0:  # also refuses nan
            self.fail(f"timeout must be >= 0 seconds (0: none), got {value}", param, ctx)
        return seconds or None


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format. Default: table on a terminal, jsonl when piped or "
                   "with --output. json is one array written as results arrive; jsonl and csv add each record as it is scored.")
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
@click.option("--frames", type=FramesType(), default="default", show_default=True,
              help="Frames to score: 'default' (the model's sampling plan), 'all' "
                   "(every frame, slow), or N frames spread over the video.")
@click.option("--backend", type=click.Choice(["openvino", "pytorch"]), default="openvino",
              show_default=True, help="Inference backend. pytorch needs torch, the CPU build: pip install "
                   "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
@click.option("--precision", type=click.Choice(["fp32", "int8"]), default="fp32", show_default=True,
              help="Model precision. int8 (OpenVINO only) is the NNCF-quantized model: faster, "
                   "scores within about a point of fp32 (see models/README.md).")
@click.option("--decoder", type=click.Choice(["pyav", "opencv"]), default="pyav",
              show_default=True, help="Video decoder. opencv has fewer safety controls (README).")
@click.option("--batch-size", type=BatchSizeType(), default="auto", show_default=True,
              help="Frames per inference batch, or 'auto': 1 with --mode latency, 4 with "
                   "--mode throughput (where views per second peak on a 2-core machine; see vqa bench).")
@click.option("--mode", type=click.Choice(["latency", "throughput"]), default="throughput", show_default=True,
              help="What to optimise: the time to each video's result (latency) or videos per "
                   "hour (throughput). Sets OpenVINO's performance hint and the auto batch size.")
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Decode worker processes (default: half the usable cores, at least 1, the rest "
                   "for inference; 0 decodes in this process, without the timeout and memory limit).")
@click.option("--timeout", "timeout_s", type=TimeoutType(), default="auto", show_default=True,
              help="Wall-clock limit in seconds on each decode task of a video (the probe, each part "
                   "split across workers; 0: none). Past it the worker is killed and replaced and "
                   "the video gets E_TIMEOUT. auto: 120 s, more for long videos with --frames all.")
@click.option("--worker-memory", "worker_memory_mb", type=click.IntRange(min=0), default=None,
              help="Address-space limit (RLIMIT_AS) per decode worker in MiB (0: none; default "
                   "4096). Less than a worker maps at start-up plus 256 MiB (about 800 MiB) is refused "
                   "before scoring (exit 2). Past it the video gets E_MEMORY_LIMIT.")
@click.option("--model-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Folder holding the model files and manifest (default: the installed model).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads for inference (default: the cores the workers leave, at least 1).")
@click.option("--timeline", is_flag=True,
              help="Add each video's per-frame data to its record: time, score, each defect's "
                   "probability, black and frozen flags (larger records; see the README).")
@click.option("--report", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write an HTML report of this run to FILE (implies --timeline); see vqa report.")
@click.option("--thumbnails", type=click.IntRange(min=0), default=50, show_default=True,
              help="With --report: thumbnails for the N lowest-scoring videos (0: none).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this machine. ray: one actor per node of a Ray cluster (RAY_ADDRESS=auto "
                   "joins the one `ray start` made; none: a local one is started), same records and "
                   "job store; --workers and --threads are then per actor. Needs: pip install 'vqa[ray]'")
@click.option("--actors-per-node", type=click.IntRange(min=1), default=None,
              help="With --engine ray: actors on each node, sharing its CPUs (default 1).")
def score(paths, fmt, output, db, retry_failed, patterns, fail_fast, quiet, frames, backend, precision,
          decoder, batch_size, mode, workers, timeout_s, worker_memory_mb, model_dir, threads, timeline,
          report, thumbnails, engine, actors_per_node):
    """Score each video in PATHS (files, or folders searched recursively).

    Folders are searched for video extensions (mp4 mov mkv webm avi m4v ts mpg mpeg
    wmv flv 3gp y4m) in sorted order; symlinked subfolders are not followed, and a linked
    file that leads outside its folder gets E_BAD_PATH. Every input gets exactly one
    record, including paths that do not exist (E_NOT_FOUND).

    A progress bar shows on stderr when it is a terminal, and a one-line summary
    on stderr ends every run (--quiet drops both). With --output, the job is
    resumable: run the same command again after any interruption.
    """
    # An interrupted job has its own status, not 1 ("some videos failed"): 130 or 143. The
    # handlers are put back afterwards, for a caller that runs the command in-process.
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _score(paths, fmt, output, db, retry_failed, patterns, fail_fast, quiet, frames, backend, precision,
               decoder, batch_size, mode, workers, timeout_s, worker_memory_mb, model_dir, threads,
               timeline or report is not None, report, thumbnails, engine, actors_per_node)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _score(paths, fmt, output, db, retry_failed, patterns, fail_fast, quiet, frames, backend, precision,
           decoder, batch_size, mode, workers, timeout_s, worker_memory_mb, model_dir, threads,
           timeline=False, report=None, thumbnails=0, engine="local", actors_per_node=None):
    to_file = output not in (None, "-")
    if fmt is None:
        fmt = "table" if not to_file and sys.stdout.isatty() else "jsonl"
    warn = lambda m: click.echo(f"warning: {m}", err=True)  # noqa: E731
    inputs = expand_inputs(paths, patterns=patterns, warn=warn)
    if not inputs:
        click.echo("error: E_USAGE: no video files to score", err=True)
        sys.exit(EXIT_USAGE)
    if db is None and to_file:
        db = default_db_path(output)
    collision = outputs.collision(output if to_file else None, db, inputs)
    if collision is None and report is not None:
        collision = report_collision(report, [output if to_file else None, db], inputs)
    if collision:  # before anything is written
        click.echo(f"error: E_USAGE: {collision}", err=True)
        sys.exit(EXIT_USAGE)

    options = dict(backend=backend, precision=precision, decoder=decoder, frames=frames, mode=mode,
                   workers=workers, batch_size=batch_size, model_dir=model_dir, threads=threads)
    # Passed only when set, so the engine's own defaults stay the defaults.
    if timeout_s != "auto":
        options["timeout_s"] = timeout_s
    if worker_memory_mb is not None:
        options["worker_memory_mb"] = worker_memory_mb or None
    if engine != "local":
        options["engine"] = engine
    elif actors_per_node is not None:
        click.echo("error: E_USAGE: --actors-per-node needs --engine ray", err=True)
        sys.exit(EXIT_USAGE)
    if actors_per_node is not None:
        options["actors_per_node"] = actors_per_node
    if timeline:
        options["timeline"] = True
    collected = [] if report is not None else None
    with ExitStack() as stack:
        try:
            store = stack.enter_context(JobStore(db)) if db else None
            scorer = stack.enter_context(_make_scorer(**options))
        except VQAError as e:
            if _debug():
                raise
            click.echo(f"error: {e.code}: {e.message}", err=True)
            sys.exit(EXIT_USAGE)
        config = dict(scorer.config) if isinstance(getattr(scorer, "config", None), dict) else {
            "sampling": frames, "backend": backend, "batch_size": batch_size, "decoder": decoder,
            "precision": precision, "mode": mode, **({"timeline": True} if timeline else {})}
        spec = getattr(scorer, "spec", None)
        model = spec.to_dict() if spec is not None else {}
        try:
            stream = stack.enter_context(outputs.open_output(output))
        except OSError as e:
            click.echo(f"error: E_USAGE: cannot write {output}: {e.strerror}", err=True)
            sys.exit(EXIT_USAGE)
        tally = Tally(len(inputs), with_store=store is not None)
        # Progress only where a person watches stderr and the results are not on that screen.
        show_progress = not quiet and sys.stderr.isatty() and (to_file or not sys.stdout.isatty())
        progress = stack.enter_context(_progress(len(inputs), show_progress))
        try:
            with _guard_output(output, store, open_writer, fmt, stream,  # CSV writes its header now
                               path_width=max(len(i.path) for i in inputs)) as writer:
                for outcome in run_job(scorer, inputs, model=model, config=config, store=store,
                                       retry_failed=retry_failed):
                    _guard_output(output, store, writer.write, outcome.record)
                    if collected is not None:
                        collected.append(outcome.record)
                    tally.add(outcome)
                    progress.update(1)
                    progress.set_postfix_str(tally.postfix(), refresh=False)
                    if fail_fast and not outcome.ok:
                        break
                _guard_output(output, store, writer.close)  # a full disk shows here, not at exit
        except BrokenPipeError:
            # The reader went away (`vqa score ... | head`): stop quietly, as Unix tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(EXIT_SOME_FAILED if tally.failed else EXIT_OK)
        except SystemExit as e:
            if e.code in (EXIT_SIGINT, EXIT_SIGTERM) and not quiet:
                progress.close()
                click.echo(tally.summary(stopped=True) + "; run the same command to resume", err=True)
            raise
        except Exception as e:  # noqa: BLE001 - one clean line unless debugging
            if _debug():
                raise
            code = e.code if isinstance(e, VQAError) else "E_INTERNAL"
            click.echo(f"error: {code}: {e}", err=True)
            sys.exit(EXIT_INTERNAL)
        progress.close()
        if not quiet:
            click.echo(tally.summary(), err=True)
        if report is not None:
            try:
                write_html(collected, report, thumbnails=thumbnails, quiet=quiet, source="vqa score")
            except OSError as e:
                click.echo(f"error: E_OUTPUT: cannot write {report}: {e.strerror}", err=True)
                sys.exit(EXIT_INTERNAL)
    sys.exit(EXIT_SOME_FAILED if tally.failed else EXIT_OK)


def _guard_output(output, store, write, *args, **kwargs):
    """``write(*args, **kwargs)``; a failing disk or file system becomes one E_OUTPUT error."""
    try:
        return write(*args, **kwargs)
    except BrokenPipeError:
        raise
    except OSError as e:
        kept = "; every record so far is in the job store: re-run to resume" if store else ""
        raise OutputError(f"cannot write {output or 'stdout'}: {e.strerror}{kept}") from None


def _terminate(signum, _frame):
    # SIGTERM (a scheduler stopping the job) and Ctrl-C unwind the same way: workers stop,
    # shared memory goes, the output is put in place; the status is 128 + the signal.
    raise SystemExit(128 + signum)


class Tally:
    """Counts for the progress bar and the closing summary."""

    def __init__(self, total: int, with_store: bool = False):
        self.total, self.ok, self.failed, self.stored = total, 0, 0, 0
        self.with_store = with_store
        self.started = time.monotonic()

    def add(self, outcome: Outcome) -> None:
        self.ok += outcome.ok
        self.failed += not outcome.ok
        self.stored += outcome.source == STORED

    def postfix(self) -> str:
        stored = f" stored={self.stored}" if self.with_store else ""
        return f"ok={self.ok} failed={self.failed}{stored}"

    def summary(self, stopped: bool = False) -> str:
        """E.g. "vqa: 50 videos: 43 ok, 7 failed; 40 from the job store, 10 processed in 3.1 s,
        193.5 videos/min". ok + failed are all the videos; from the store + processed too."""
        elapsed = time.monotonic() - self.started
        done = self.ok + self.failed
        processed = done - self.stored  # scored now, or failed their checks now
        noun = "video" if self.total == 1 else "videos"
        head = f"{done} of {self.total} {noun}" if done < self.total or stopped else f"{done} {noun}"
        text = f"vqa: {'interrupted, ' if stopped else ''}{head}: {self.ok} ok, {self.failed} failed; "
        if self.with_store:
            text += f"{self.stored} from the job store, "
        text += f"{processed} processed in {elapsed:.1f} s"
        if processed and elapsed > 0:
            text += f", {processed / elapsed * 60:.1f} videos/min"
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


@cli.command()
@click.argument("clip", type=click.Path(exists=True))
@click.option("--study", "studies", multiple=True,
              type=click.Choice(["batch", "pipeline", "startup", "concurrency", "streaming", "all", "folder",
                                 "command"]),
              help="Repeatable. batch: inference by batch size; pipeline: naive vs engine vs decode and "
                   "inference floors on CLIP; startup: where `vqa score` spends its start-up; concurrency: "
                   "8 threads on one Scorer vs one score_many; streaming: 1,000,000 paths through "
                   "score_many. Default: batch, pipeline, startup; all: every one. folder (CLIP is a "
                   "folder of videos, or an empty one to fill): videos/min by sampling and worker count "
                   "(vqa.bench_folder); command: `vqa score CLIP` against decoding every frame.")
@click.option("--videos", type=click.IntRange(min=1), default=None,
              help="folder study: clips to make in an empty folder (default 32).")
@click.option("--clip-spec", default=None, metavar="WxH,SECONDS,KEYFRAME_S",
              help="folder study: the clips to make (default 1280x720,10,2).")
@click.option("--workers", "sweep", multiple=True, type=click.IntRange(min=1),
              help="folder study: worker counts to sweep, repeatable (default 1, 2, 4, ... cores - 1).")
@click.option("--rounds", type=click.IntRange(min=1), default=1,
              help="folder study: times each setting is measured, in turns (best and median shown).")
@click.option("--quick", is_flag=True, help="Fewer points, default sampling, no PyTorch: under a minute.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--backend", "backends", multiple=True, metavar="NAME[:PRECISION]",
              help="Backend to measure, repeatable (default: openvino:fp32, openvino:int8, pytorch:fp32). "
                   "The pipeline study's naive baseline runs only when pytorch is measured.")
@click.option("--batch-size", "batch_sizes", multiple=True, type=click.IntRange(min=1),
              help="Batch size of the batch study, repeatable (default: 1 2 4 8 16 32).")
@click.option("--seconds", type=click.FloatRange(min=0.001), default=None,
              help="Timing window per batch-study point, after warm-up (default 1, quick 0.3).")
@click.option("--frames", type=FramesType(), default=None,
              help="Sampling of the pipeline study (default 'all', which also times the default "
                   "sampling; quick: 'default').")
@click.option("--model-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Folder holding the model files and manifest (default: the installed model).")
def bench(clip, studies, videos, clip_spec, sweep, rounds, quick, as_json, backends, batch_sizes, seconds, frames,
          model_dir):
    """Measure inference speed by batch size, and the scoring pipeline against its floors, on CLIP.

    Each number is one measurement: on a shared machine compare rows side by side and
    note the load average printed with them. Make a clip with scripts/make_bench_clip.py.
    """
    import json

    from vqa import bench as vqa_bench  # torch is imported only if a pytorch backend is measured

    if {"folder", "command"} & set(studies):
        _bench_folder(clip, studies, videos, clip_spec, sweep, rounds, as_json, model_dir)
        return
    try:
        result = vqa_bench.run_benchmark(
            clip, studies=vqa_bench.STUDIES if "all" in studies else (studies or vqa_bench.DEFAULT_STUDIES),
            backends=vqa_bench.parse_backends(backends) if backends else None,
            batch_sizes=batch_sizes or None, seconds=seconds, frames=frames, model_dir=model_dir, quick=quick,
            progress=lambda msg: click.echo(f"vqa bench: {msg}", err=True))
    except VQAError as e:
        if _debug():
            raise
        click.echo(f"error: {e.code}: {e.message}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(json.dumps(result, indent=2) if as_json else vqa_bench.format_report(result))


def _bench_folder(path, studies, videos, clip_spec, sweep, rounds, as_json, model_dir) -> None:
    """The folder and command studies (vqa.bench_folder), alone or together."""
    import json

    from vqa import bench_folder

    progress = lambda msg: click.echo(f"vqa bench: {msg}", err=True)  # noqa: E731
    try:
        out = {}
        if "folder" in studies:
            spec = {}
            if clip_spec:
                try:
                    size, length, key = clip_spec.split(",")
                    w, h = (int(x) for x in size.lower().split("x"))
                    spec = {"size": (w, h), "length_s": float(length), "keyframe_s": float(key)}
                except ValueError:
                    raise UsageError(f"--clip-spec must be WxH,SECONDS,KEYFRAME_S, got {clip_spec!r}") from None
            out["folder"] = bench_folder.folder_study(path, videos=videos or bench_folder.DEFAULT_VIDEOS,
                                                      workers=sweep or None, rounds=rounds, model_dir=model_dir,
                                                      progress=progress, **spec)
        if "command" in studies:
            out["command"] = bench_folder.command_study(path, model_dir=model_dir, progress=progress)
    except VQAError as e:
        if _debug():
            raise
        click.echo(f"error: {e.code}: {e.message}", err=True)
        sys.exit(EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo("\n\n".join(bench_folder.format_folder(r) if k == "folder" else bench_folder.format_command(r)
                               for k, r in out.items()))


cli.add_command(report_command)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="vqa")


if __name__ == "__main__":
    main()

