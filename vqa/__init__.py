"""vqa: no-reference video quality assessment.

>>> import vqa
>>> result = vqa.score("clip.mp4")                      # doctest: +SKIP
>>> result.score, result.category, result.defects       # doctest: +SKIP

The public names load on first use (PEP 562): a decode worker is a spawned process that
imports ``vqa.engine.worker``, and so this package, and it needs neither the options, the
pipeline nor the engines behind them (issue 18, start-up).

The rooms, from a path to a record, each importing only from its own and the rooms above it
in this list (tests/test_layout.py holds them to it):

- words: errors, codes, types, words, threads, limits;
- files and lifetimes: files, inputs (what a path may be), outputs, lifecycle, futures;
- stages: decode/, sample, preprocess, infer/, model, aggregate, batch;
- options: config (ScoreOptions);
- engines: engine/ (in this process, or over decode workers);
- the Scorer's front: scorer/ (Scorer, RayScorer, open_scorer);
- records and jobs: report, report_html/, jobstore, job;
- doors: this package's names, cli/, serve/, bench/.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import BackendUnavailable, InputError, ModelError, UsageError, VQAError

if TYPE_CHECKING:
    from .config import ScoreOptions
    from .scorer.by_engine import open_scorer
    from .scorer.local import Scorer, score
    from .types import DEFECT_TYPES, Defect, VideoInfo, VideoScore

__version__ = "0.1.0"

# name -> the module that defines it
_LAZY = {"ScoreOptions": "config", "open_scorer": "scorer.by_engine", "Scorer": "scorer.local", "score": "scorer.local",
         "DEFECT_TYPES": "types", "Defect": "types", "VideoInfo": "types", "VideoScore": "types"}

__all__ = ["BackendUnavailable", "DEFECT_TYPES", "Defect", "InputError", "ModelError", "ScoreOptions", "Scorer",
           "UsageError", "VQAError", "VideoInfo", "VideoScore", "__version__", "open_scorer",
           "score"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'vqa' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
