"""The Scorer's front: what a caller holds to turn paths into records.

    local.py      Scorer: the model loaded once, videos scored through one engine of this
                  machine (vqa.engine); ``score`` on a process-wide default Scorer
    ray.py        RayScorer: the same surface, its videos scored by NodeScorer actors (each a
                  local Scorer) on a Ray cluster
    by_engine.py  open_scorer: one or the other by engine name (``--engine local|ray``)

Everything here sits above vqa.engine and is only imported by the doors (vqa, the CLI, the
job runner, the service, the benchmarks). The names load on first use, as vqa's do: a job
that scores nothing never imports an engine.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .by_engine import open_scorer
    from .local import Scorer, default_scorer, score
    from .ray import RayScorer

# name -> the module of this package that defines it
_LAZY = {"Scorer": "local", "score": "local", "default_scorer": "local", "RayScorer": "ray",
         "open_scorer": "by_engine"}

__all__ = ["RayScorer", "Scorer", "default_scorer", "open_scorer", "score"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'vqa.scorer' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value
