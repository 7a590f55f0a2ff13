"""Typed records passed between stages. Units live in the field names.

The record a video ends with (``VideoScore.to_dict()``, the output contract) has its shape
here and only here: its fields, the keys of ``video`` (``VIDEO_RECORD_KEYS``) and of the
objects inside it (the ``...Block`` types). The JSON Schema and the CSV columns
(``vqa.report``) are made from them, and tests hold the report's reader to them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

DEFECT_TYPES = (
    "blur", "noise", "compression", "low_resolution", "dark", "overexposed", "frozen", "black",
)
# Defects the network predicts per frame; frozen and black are measured from the frames.
MODEL_DEFECTS = DEFECT_TYPES[:6]


class FramesBlock(TypedDict):
    """A record's ``frames``: frames scored, decoded to reach them, and failed to decode."""

    sampled: int
    decoded: int
    decode_errors: int


class ModelBlock(TypedDict):
    """A record's ``model``: the model's name, version and the sha256 of the file that ran."""

    name: str
    version: str
    sha256: str


class _ConfigBlock(TypedDict):
    sampling: int | str  # --frames: "default", "all" or a count
    backend: str
    batch_size: int
    decoder: str
    precision: str
    mode: str


class ConfigBlock(_ConfigBlock, total=False):
    """A record's ``config``: the options a result was made with (``CONFIG_KEYS`` says which of
    them change it); ``timeline`` only when on."""

    timeline: bool


class SamplingBlock(TypedDict):
    """A record's ``sampling``: the plan used (``SamplePlan.to_dict``)."""

    mode: str
    requested: int | None
    runs: int
    run_length: int


class ErrorBlock(TypedDict):
    """A record's ``error``: a stable code (vqa.codes.ErrorCode) and a message for people."""

    code: str
    message: str


# Each key of ``config`` in order, and whether it changes a result: the job store reuses a record
# only for the same model and values of those that do (vqa.jobstore.config_key). batch_size and mode
# change only speed (the engine's tests hold results to that); a timeline changes no score, but a
# record with one is another. Workers, threads, limits: the machine's, planned where workers start.
CONFIG_KEYS: dict[str, bool] = {"sampling": True, "backend": True, "batch_size": False, "decoder": True,
                                "precision": True, "mode": False, "timeline": True}
RESULT_OPTIONS = tuple(key for key, changes_result in CONFIG_KEYS.items() if changes_result)
# The keys of a record's ``video``, in the order it carries them: VideoInfo's fields but
# frame_count_declared and mtime_ns (properties of this copy of the file, not of its content).
VIDEO_RECORD_KEYS = ("width", "height", "fps", "duration_s", "codec", "rotation", "frame_count",
                     "pixel_format", "size_bytes", "fingerprint")
# A record's objects by field, for whatever lists their keys (the schema, the CSV columns).
RECORD_BLOCKS: dict[str, type] = {"frames": FramesBlock, "model": ModelBlock, "config": ConfigBlock,
                                  "sampling": SamplingBlock, "error": ErrorBlock}


def block_keys(block: type, *, required_only: bool = False) -> tuple[str, ...]:
    """The keys of one of the ``...Block`` types, in order (``required_only``: those always there)."""
    return tuple(k for k in block.__annotations__ if not required_only or k in block.__required_keys__)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class VideoInfo:
    """Stream metadata, with width/height as displayed (rotation already applied)."""

    width: int
    height: int
    fps: float
    duration_s: float
    frame_count: int  # declared or estimated (duration * fps) when the container does not say
    codec: str
    # Degrees the file's display matrix turns frames counter-clockwise to display them, as
    # ffprobe's "rotation" gives it, modulo 360 (ffprobe -90 is 270 here); frames come upright.
    rotation: int = 0
    pixel_format: str = ""
    frame_count_declared: bool = False  # the container states frame_count (not an estimate)
    # The file the frames came from, as opened: what a job store keys a record on.
    size_bytes: int = 0
    mtime_ns: int = 0  # not in to_dict(): a property of the copy, not of the content
    fingerprint: str = ""  # vqa.files.fingerprint: the size and the first and last 128 KiB

    def to_dict(self) -> dict[str, Any]:
        """The record's ``video``: ``VIDEO_RECORD_KEYS``, rates and times to 3 decimals."""
        rounded = {"fps": round(self.fps, 3), "duration_s": round(self.duration_s, 3)}
        return {k: rounded.get(k, getattr(self, k)) for k in VIDEO_RECORD_KEYS}


@dataclass(frozen=True)
class Run:
    """A run of ``count`` consecutive frames starting at the first frame with pts >= start_s.

    The run stands for the stretch of the timeline [span_start_s, span_end_s): defects found
    in it are reported over that stretch.
    """

    start_s: float
    count: int
    span_start_s: float
    span_end_s: float


@dataclass(frozen=True)
class SamplePlan:
    mode: str  # "default", "count" or "all"
    runs: tuple[Run, ...]
    requested: int | None  # frames asked for; None for "all"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "requested": self.requested, "runs": len(self.runs),
                "run_length": max((r.count for r in self.runs), default=0)}


@dataclass
class Frame:
    """One decoded frame, RGB uint8 HxWx3, rotation applied."""

    run: int  # index of the plan run this frame belongs to
    pts_s: float
    rgb: np.ndarray

    def __post_init__(self) -> None:
        if self.rgb.ndim != 3 or self.rgb.shape[2] != 3 or self.rgb.dtype != np.uint8:
            raise ValueError(f"frame must be HxWx3 uint8, got {self.rgb.shape} {self.rgb.dtype}")


@dataclass(frozen=True)
class Defect:
    type: str
    severity: float  # 0..1
    start_s: float
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "severity": round(self.severity, 3),
                "start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3)}


@dataclass
class VideoScore:
    """The result for one video: what every output format is made from.

    Fields:
        path: the video's path as given (a name that is not UTF-8 keeps its bytes as
            surrogate escapes; ``os.fsencode(path)`` gives them back).
        status: ``"ok"``, or ``"error"`` when the video could not be scored.
        score: 0-100 to one decimal, the VMAF the video would get against its pristine source;
            None on error.
        category: ``"excellent"``, ``"good"``, ``"fair"``, ``"poor"`` or ``"bad"``, from the score,
            capped when defects cover 20% or 50% of the timeline (``vqa.aggregate``).
        defects: ``Defect`` records (type, severity 0-1, start_s, end_s), in timeline order.
        video: the stream's metadata (``VideoInfo``); None when the file could not be opened.
        frames: counts: ``sampled`` (scored), ``decoded`` (decoded to reach them),
            ``decode_errors`` (packets or frames that failed).
        model: the model's name, version and sha256.
        config: the options that shape the result (sampling, backend, batch size, decoder,
            precision, mode); the same config and model give the same record.
        sampling: the plan used: mode, frames requested, runs, run length.
        error: ``{"code", "message"}`` when status is "error", with a stable ``E_*`` code.
        warnings: ``W_*`` codes with a message each, e.g. ``W_TRUNCATED``, ``W_CORRUPT_FRAMES``.
        timeline: per sampled frame (time, score, each defect's probability, black and frozen
            flags), only when asked for (``Scorer(timeline=True)``); else None.
    """

    path: str
    status: str  # "ok" or "error"
    score: float | None = None
    category: str | None = None
    defects: list[Defect] = field(default_factory=list)
    video: VideoInfo | None = None
    frames: dict[str, int] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    # Not required of a record read back (vqa.report.CONTRACT_SCHEMA): records made before
    # there was a sampling block lack it, and a timeline is there only when asked for.
    sampling: dict[str, Any] = field(default_factory=dict, metadata={"required": False})
    error: dict[str, str] | None = None
    warnings: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] | None = field(default=None, metadata={"required": False})

    @property
    def ok(self) -> bool:
        """True when the video was scored (``status == "ok"``)."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-able data: the output contract every format writes
        (``vqa.report.CONTRACT_SCHEMA``). Scores round to 2 decimals, times to 3; ``timeline``
        is there only when it was asked for."""
        d = {
            "path": self.path,
            "status": self.status,
            "score": None if self.score is None else round(self.score, 2),
            "category": self.category,
            "defects": [d.to_dict() for d in self.defects],
            "video": None if self.video is None else self.video.to_dict(),
            "frames": dict(self.frames),
            "model": dict(self.model),
            "config": dict(self.config),
            "sampling": dict(self.sampling),
            # Plain str: a code made as an ErrorCode member is its bare value here (YAML, pickles
            # read without vqa, `type(code) is str`), and the record's own dict is not handed out.
            "error": None if self.error is None else {k: str(v) for k, v in self.error.items()},
            "warnings": [str(w) for w in self.warnings],
        }
        if self.timeline is not None:
            d["timeline"] = [dict(p) for p in self.timeline]
        return d
