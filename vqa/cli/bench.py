"""``vqa bench``: flags in, vqa.bench's studies out (a table, or JSON)."""
from __future__ import annotations

import click

from vqa.cli.common import EXIT_USAGE, debug, fail, option_for
from vqa.codes import ErrorCode
from vqa.config import DECODERS, cli_fields
from vqa.errors import UsageError, VQAError

_FIELDS = {f.name: f for f in cli_fields()}


@click.command()
@click.argument("clip", type=click.Path(exists=True))
@click.option("--study", "studies", multiple=True,
              type=click.Choice(["batch", "pipeline", "startup", "concurrency", "streaming", "all", "folder",
                                 "command"]),
              help="Repeatable. batch: inference by batch size; pipeline: naive vs engine vs decode and "
                   "inference floors on CLIP; startup: where `vqa score` spends its start-up; concurrency: "
                   "8 threads on one Scorer vs one score_many; streaming: 1,000,000 paths through "
                   "score_many. Default: batch, pipeline, startup; all: every one. folder (CLIP is a "
                   "folder of videos, or an empty one to fill): videos/min by sampling and worker count "
                   "(vqa.bench.folder); command: `vqa score CLIP` against decoding every frame.")
@click.option("--videos", type=click.IntRange(min=1), default=None,
              help="folder study: clips to make in an empty folder (default 32).")
@click.option("--clip-spec", default=None, metavar="WxH,SECONDS,KEYFRAME_S",
              help="folder study: the clips to make (default 1280x720,10,2).")
@click.option("--workers", "sweep", multiple=True, type=click.IntRange(min=1),
              help="folder study: worker counts to sweep, repeatable (default 1, 2, 4, ... cores - 1).")
@click.option("--no-sweep", is_flag=True, help="folder study: no worker sweep, the auto split's rows alone.")
@click.option("--rounds", type=click.IntRange(min=1), default=1,
              help="folder study: times each setting is measured, in turns (best and median shown).")
@click.option("--quick", is_flag=True, help="Fewer points, default sampling, no PyTorch: under a minute.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--backend", "backends", multiple=True, metavar="NAME[:PRECISION]",
              help="Backend to measure, repeatable (default: openvino:fp32, openvino:int8, pytorch:fp32). "
                   "The pipeline study's naive baseline runs only when pytorch is measured. folder study "
                   "(default: openvino:fp32): each setting runs on each backend in turn, e.g. --backend "
                   "openvino:fp32 --backend cuda:fp32 compares the CPU and GPU paths side by side.")
@click.option("--decoder", "decoders", multiple=True, metavar="|".join((*DECODERS, "pyav+nvdec:N", "nvdec:P")),
              help="folder study: decoder, repeatable; each is crossed with each --backend (default: pyav). "
                   "pyav+nvdec:N adds N NVDEC workers beside the CPU ones (--nvdec-workers N); nvdec with a "
                   "cuda backend is the GPU engine (pictures stay on the GPU), nvdec:P the same in P processes "
                   "(--gpu-processes P). e.g. --backend cuda:fp16 --decoder pyav --decoder nvdec:4.")
@click.option("--batch-size", "batch_sizes", multiple=True, type=click.IntRange(min=1),
              help="Batch size of the batch study, repeatable (default: 1 2 4 8 16 32); folder study: one "
                   "batch size for every row (default: auto).")
@click.option("--seconds", type=click.FloatRange(min=0.001), default=None,
              help="Timing window per batch-study point, after warm-up (default 1, quick 0.3).")
@option_for(_FIELDS["frames"], default=None, help="Sampling of the pipeline study (default 'all', which also "
            "times the default sampling; quick: 'default'); folder study: the auto split's one plan "
            "(default: both default and all).")
@option_for(_FIELDS["model_dir"])
def bench(clip, studies, videos, clip_spec, sweep, no_sweep, rounds, quick, as_json, backends, decoders, batch_sizes,
          seconds, frames, model_dir):
    """Measure inference speed by batch size, and the scoring pipeline against its floors, on CLIP.

    Each number is one measurement: on a shared machine compare rows side by side and
    note the load average printed with them. Make a clip with scripts/bench/make_bench_clip.py.
    """
    import json

    from vqa import bench as vqa_bench  # torch is imported only if a pytorch backend is measured
    from vqa.bench.report import format_report

    if {"folder", "command"} & set(studies):
        if sweep and no_sweep:
            fail(ErrorCode.E_USAGE, "--workers and --no-sweep contradict each other", EXIT_USAGE)
        _bench_folder(clip, studies, videos=videos, clip_spec=clip_spec, sweep=[] if no_sweep else sweep or None,
                      rounds=rounds, as_json=as_json, model_dir=model_dir, backends=backends, frames=frames,
                      decoders=decoders, batch_sizes=batch_sizes)
        return
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
    click.echo(json.dumps(result, indent=2) if as_json else format_report(result))


def _bench_folder(path, studies, *, videos, clip_spec, sweep, rounds, as_json, model_dir, backends, frames,
                  decoders=(), batch_sizes=()) -> None:
    """The folder and command studies (vqa.bench.folder), alone or together."""
    import json

    from vqa.bench import folder as bench_folder
    from vqa.bench.studies import parse_backends

    def progress(msg: str) -> None:
        click.echo(f"vqa bench: {msg}", err=True)

    try:
        out = {}
        if "folder" in studies:
            spec: dict = {}
            if clip_spec:
                try:
                    size, length, key = clip_spec.split(",")
                    w, h = (int(x) for x in size.lower().split("x"))
                    spec = {"size": (w, h), "length_s": float(length), "keyframe_s": float(key)}
                except ValueError:
                    raise UsageError(f"--clip-spec must be WxH,SECONDS,KEYFRAME_S, got {clip_spec!r}") from None
            if frames is not None:
                spec["sampling"] = (frames,)
            if len(batch_sizes) > 1:
                raise UsageError(f"the folder study takes one --batch-size, got {len(batch_sizes)}")
            out["folder"] = bench_folder.folder_study(path, videos=videos or bench_folder.DEFAULT_VIDEOS,
                                                      workers=sweep, rounds=rounds, model_dir=model_dir,
                                                      backends=parse_backends(backends) if backends else None,
                                                      decoders=list(decoders) or None, progress=progress,
                                                      batch_size=batch_sizes[0] if batch_sizes else None, **spec)
        if "command" in studies:
            out["command"] = bench_folder.command_study(path, model_dir=model_dir, progress=progress)
    except VQAError as e:
        if debug():
            raise
        fail(e.code, e.message, EXIT_USAGE)
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo("\n\n".join(bench_folder.format_folder(r) if k == "folder" else bench_folder.format_command(r)
                               for k, r in out.items()))
