"""``vqa report`` and the report step of ``vqa score --report``: click in, vqa.report_html out."""
from __future__ import annotations

import os
import sys

import click

from vqa import outputs
from vqa.cli.common import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, fail
from vqa.codes import ErrorCode
from vqa.errors import VQAError
from vqa.words import counted


def write_html(records, out: str, *, thumbnails: int, quiet: bool, source: str) -> None:
    """Build the page (thumbnails with a progress bar on a terminal) and put it at ``out``."""
    from tqdm import tqdm

    from vqa.report_html import write_report

    bar = None

    def on_plan(n: int) -> None:
        nonlocal bar
        if n and not quiet and sys.stderr.isatty():
            bar = tqdm(total=n, unit="video", desc="thumbnails", file=sys.stderr, dynamic_ncols=True)

    try:
        write_report(records, out, thumbnails=thumbnails, source=source, on_plan=on_plan,
                     progress=lambda n: bar.update(n) if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    if not quiet:
        click.echo(f"vqa: report of {counted(len(records), 'video')} written to {out}", err=True)


@click.command("report")
@click.argument("results", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False), required=True,
              help="The HTML file to write: one self-contained page that works offline.")
@click.option("--thumbnails", type=click.IntRange(min=0), default=50, show_default=True,
              help="Take thumbnails (the worst frame, the middle of each defect segment) for the N "
                   "lowest-scoring videos, decoded now from the files named in RESULTS (0: none).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no closing line on stderr.")
def report(results, out, thumbnails, quiet):
    """Write an HTML report over RESULTS, the output of vqa score (--format jsonl or json).

    Summary counts and a score histogram, one sortable, filterable row per video, a timeline
    per video (the score over time needs records made with vqa score --timeline), and
    thumbnails. Relative paths in RESULTS are opened from the current folder.
    """
    from vqa.report_html import load_records

    if not out.strip():
        fail(ErrorCode.E_USAGE, "--output is empty: give a file name", EXIT_USAGE)
    if outputs.file_key(out) == outputs.file_key(results):
        fail(ErrorCode.E_USAGE, f"--output {out} is RESULTS: writing it would destroy it", EXIT_USAGE)
    try:
        records = load_records(results)
    except VQAError as e:
        click.echo(f"error: {e.code}: {e.message}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as e:
        fail(ErrorCode.E_USAGE, f"cannot read {results}: {e.strerror}", EXIT_USAGE)
    try:
        write_html(records, out, thumbnails=thumbnails, quiet=quiet, source=f"from {os.fsdecode(results)}")
    except VQAError as e:  # another job writes it, or it is no file to write
        click.echo(f"error: {e.code}: {e.message}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as e:
        fail(ErrorCode.E_OUTPUT, f"cannot write {out}: {e.strerror}", EXIT_INTERNAL)
    sys.exit(EXIT_OK)
