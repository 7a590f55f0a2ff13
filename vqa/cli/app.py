"""The ``vqa`` command group: click and every command, imported by ``vqa.cli.main`` once it
has started what can start before them (vqa.engine.prestart), and by ``vqa.cli.cli``."""
from __future__ import annotations

import click

from vqa.cli.bench import bench
from vqa.cli.report import report
from vqa.cli.score import score
from vqa.cli.serve import serve
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


cli.add_command(score)
cli.add_command(report)
cli.add_command(bench)
cli.add_command(serve)
