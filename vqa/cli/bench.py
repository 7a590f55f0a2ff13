"""``vqa bench``: flags in, vqa.bench's studies out (a table, or JSON)."""
from __future__ import annotations

import click

from vqa.cli.common import EXIT_USAGE, debug, fail, option_for
from vqa.config import cli_fields
from vqa.errors import VQAError

_FIELDS = {f.name: f for f in cli_fields()}


@click.command()
@click.argument("clip", type=click.Path(exists=True, dir_okay=False))
@click.option("--study", "studies", multiple=True,
              type=click.Choice(["batch", "pipeline", "startup", "concurrency", "streaming", "all"]),
              help="Repeatable. batch: inference by batch size; pipeline: naive vs engine vs decode and "
                   "inference floors on CLIP; startup: where `vqa score` spends its start-up; concurrency: "
                   "8 threads on one Scorer vs one score_many; streaming: 1,000,000 paths through "
                   "score_many. Default: batch, pipeline, startup; all: every one.")
@click.option("--quick", is_flag=True, help="Fewer points, default sampling, no PyTorch: under a minute.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--backend", "backends", multiple=True, metavar="NAME[:PRECISION]",
              help="Backend to measure, repeatable (default: openvino:fp32, openvino:int8, pytorch:fp32). "
                   "The pipeline study's naive baseline runs only when pytorch is measured.")
@click.option("--batch-size", "batch_sizes", multiple=True, type=click.IntRange(min=1),
              help="Batch size of the batch study, repeatable (default: 1 2 4 8 16 32).")
@click.option("--seconds", type=click.FloatRange(min=0.001), default=None,
              help="Timing window per batch-study point, after warm-up (default 1, quick 0.3).")
@option_for(_FIELDS["frames"], default=None, help="Sampling of the pipeline study (default 'all', which also "
            "times the default sampling; quick: 'default').")
@option_for(_FIELDS["model_dir"])
def bench(clip, studies, quick, as_json, backends, batch_sizes, seconds, frames, model_dir):
    """Measure inference speed by batch size, and the scoring pipeline against its floors, on CLIP.

    Each number is one measurement: on a shared machine compare rows side by side and
    note the load average printed with them. Make a clip with scripts/make_bench_clip.py.
    """
    import json

    from vqa import bench as vqa_bench  # torch is imported only if a pytorch backend is measured

    try:
        result = vqa_bench.run_benchmark(
            clip, studies=vqa_bench.STUDIES if "all" in studies else (studies or vqa_bench.DEFAULT_STUDIES),
            backends=vqa_bench.parse_backends(backends) if backends else None,
            batch_sizes=batch_sizes or None, seconds=seconds, frames=frames, model_dir=model_dir, quick=quick,
            progress=lambda msg: click.echo(f"vqa bench: {msg}", err=True))
    except VQAError as e:
        if debug():
            raise
        fail(e.code, e.message, EXIT_USAGE)
    click.echo(json.dumps(result, indent=2) if as_json else vqa_bench.format_report(result))
