"""The ``vqa`` command: parse options, then call the library. The only package that imports click.

    vqa score  -> vqa.cli.score  -> vqa.job.FolderJob (vqa.config.ScoreOptions)
    vqa report -> vqa.cli.report -> vqa.report_html
    vqa bench  -> vqa.cli.bench  -> vqa.bench
    vqa serve  -> vqa.cli.serve  -> vqa.serve (vqa.job.run_folder_job per job)

Each command parses, shows progress, handles signals and maps errors to exit statuses; what it
does to a video goes through the library, so a script can do the same without the CLI.
"""
from __future__ import annotations

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


def main(argv: list[str] | None = None) -> None:
    _spare_the_workers_this_script()
    cli.main(args=argv, prog_name="vqa")
