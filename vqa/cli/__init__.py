"""The ``vqa`` command: parse options, then call the library. The only package that imports click.

    vqa score  -> vqa.cli.score  -> vqa.job.FolderJob (vqa.config.ScoreOptions)
    vqa report -> vqa.cli.report -> vqa.report_html
    vqa bench  -> vqa.cli.bench  -> vqa.bench

Each command parses, shows progress, handles signals and maps errors to exit statuses; what it
does to a video goes through the library, so a script can do the same without the CLI.
"""
from __future__ import annotations

import click

from vqa.cli import bench, report, score
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


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="vqa")
