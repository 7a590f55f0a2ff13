"""``vqa bench``'s studies: what the model, the engine and a folder job cost on this machine.

Each study returns a plain JSON-able dict; the rooms:

- ``studies``: inference by batch size and the clip scored four ways (``batch_study``,
  ``pipeline_study``), and ``run_benchmark``, which runs the studies asked for on one clip;
- ``engine``: the engine's start-up, concurrent callers and a million-path stream;
- ``folder``: folder throughput by plan, worker count and backend, and `vqa score CLIP`
  against decoding every frame (``--study folder|command``);
- ``report``: the tables the CLI prints from those dicts;
- ``clip``: the benchmark clip (textured, moving, x264), made when a folder study needs one;
- ``common``: what the studies share (load average, decode floor, ratios, the noise note).

    >>> from vqa.bench import format_report, run_benchmark
    >>> print(format_report(run_benchmark("clip.mp4")))         # doctest: +SKIP
"""
from __future__ import annotations

from .report import format_report
from .studies import DEFAULT_STUDIES, QUICK, STUDIES, batch_study, parse_backends, pipeline_study, run_benchmark

__all__ = ["DEFAULT_STUDIES", "QUICK", "STUDIES", "batch_study", "format_report", "parse_backends", "pipeline_study",
           "run_benchmark"]
