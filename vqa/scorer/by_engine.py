"""``open_scorer``: a Scorer by engine name, for callers that let the user choose (the CLI)."""
from __future__ import annotations

from typing import Any

from ..config import ENGINES, ScoreOptions
from ..errors import UsageError


def open_scorer(options: ScoreOptions | None = None, /, *, engine: str = "local", **kwargs: Any):
    """A ``vqa.Scorer`` (``engine="local"``: this machine), or a ``vqa.scorer.ray.RayScorer``
    (``engine="ray"``: actors on a Ray cluster, with the same records; it also takes
    ``address`` and ``actors_per_node``). Either drives ``vqa.job.run_job``. Ray is imported
    only for ``engine="ray"``; without it installed that is ``BackendUnavailable``."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == "ray":
        from .ray import RayScorer
        return RayScorer(options, **kwargs)
    from .local import Scorer
    return Scorer(options, **kwargs)
