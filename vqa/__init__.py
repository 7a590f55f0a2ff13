"""vqa: no-reference video quality assessment.

>>> import vqa
>>> result = vqa.score("clip.mp4")                      # doctest: +SKIP
>>> result.score, result.category, result.defects       # doctest: +SKIP
"""
from .errors import BackendUnavailable, InputError, ModelError, UsageError, VQAError
from .config import ScoreOptions
from .engines import open_scorer
from .pipeline import Scorer, score
from .types import DEFECT_TYPES, Defect, VideoInfo, VideoScore

__version__ = "0.1.0"

__all__ = ["BackendUnavailable", "DEFECT_TYPES", "Defect", "InputError", "ModelError", "ScoreOptions", "Scorer",
           "UsageError", "VQAError", "VideoInfo", "VideoScore", "__version__", "open_scorer",
           "score"]
