"""The ``vqa`` command: parse options, then call the library. The only package that imports click.

    vqa score  -> vqa.cli.score  -> vqa.job.FolderJob (vqa.config.ScoreOptions)
    vqa report -> vqa.cli.report -> vqa.report_html
    vqa bench  -> vqa.cli.bench  -> vqa.bench
    vqa serve  -> vqa.cli.serve  -> vqa.serve (vqa.job.run_folder_job per job)

Each command parses, shows progress, handles signals and maps errors to exit statuses; what it
does to a video goes through the library, so a script can do the same without the CLI.
"""
from __future__ import annotations

import os
import sys

import click

from vqa.cli import bench, report, score, serve
from vqa.cli.common import EXIT_CODES_HELP


def _print_version(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    import vqa
    click.echo(f"vqa {vqa.__version__}")
    ctx.exit(0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
def cli():
    """No-reference video quality assessment: a 0-100 score that predicts VMAF,
    a quality category and timestamped defects."""


cli.add_command(score.score)
cli.add_command(report.report)
cli.add_command(bench.bench)
cli.add_command(serve.serve)


def _spare_the_workers_this_script() -> None:
    """Keep spawned decode workers from running the ``vqa`` console script again.

    multiprocessing's spawn runs the parent's main script in each child (as ``__mp_main__``)
    when it was started from a file: for the installed ``vqa`` command that is pip's wrapper,
    which imports this package, click and every command, 0.35 s of a core per worker before
    it opens a video, while the parent compiles the model (issue 18, start-up). A worker's
    code lives in ``vqa.engine.worker``; it needs nothing from the script. ``python -m
    vqa.cli`` is spared already: spawn never re-runs a package's ``__main__``. Only a main
    module that runs this function (``from vqa.cli import main``) loses its file name."""
    script = sys.modules.get("__main__")
    if (script is not None and getattr(script, "__spec__", None) is None and getattr(script, "main", None) is main
            and hasattr(script, "__file__")):
        del script.__file__


def _exit_without_teardown(code: int) -> None:
    """Exit with ``code`` as ``sys.exit`` would, less the interpreter's teardown: tearing
    down OpenVINO, NumPy, OpenCV and the rest took 0.1 to 0.2 s on 2 cores after the last
    record was written (issue 18). The atexit hooks still run (they close engines left
    open), and stdout and stderr are flushed; the command's own files are closed by then.
    Only where nothing else runs: with another thread or a child process alive, the normal
    exit waits for them as it should."""
    import atexit
    import multiprocessing
    import threading

    if threading.active_count() > 1 or multiprocessing.active_children():
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: as at a normal exit, nothing to do
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    _spare_the_workers_this_script()
    try:
        cli.main(args=argv, prog_name="vqa")
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            raise
        _exit_without_teardown(e.code or 0)
