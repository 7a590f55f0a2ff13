"""Writers that turn ``VideoScore`` records into table, JSON, JSON Lines or CSV output.

Every writer streams: ``write(record)`` is called as each video finishes and ``close()``
finishes the document. Writers never close the stream they were given; the caller owns it.
The dict from ``VideoScore.to_dict()`` is the output contract; ``CONTRACT_SCHEMA`` states it.
"""
from __future__ import annotations

import csv
import json
import re
from abc import ABC, abstractmethod
from dataclasses import fields
from typing import Any, Callable, Mapping

from vqa.codes import ErrorCode
from vqa.errors import UsageError
from vqa.types import (DEFECT_TYPES, MODEL_DEFECTS, VIDEO_RECORD_KEYS, ConfigBlock, Defect, ErrorBlock, FramesBlock,
                       ModelBlock, SamplingBlock, VideoScore, block_keys)

FORMATS = ("table", "json", "jsonl", "csv")
from .aggregate import CATEGORIES
from .outputs import TextSink

# Every field of the contract, flat, from its types (vqa.types). The first 13 columns came first
# and keep their names and order; the nested objects follow as "<object>_<key>" columns (video's
# keys keep their bare names; config's timeline, there only when on, has none).
_VIDEO_KEYS = VIDEO_RECORD_KEYS
_NESTED = {
    "frames": block_keys(FramesBlock),
    "model": block_keys(ModelBlock),
    "config": block_keys(ConfigBlock, required_only=True),
    "sampling": block_keys(SamplingBlock),
}
CSV_COLUMNS = (
    "path", "status", "score", "category", "defects", "width", "height", "fps",
    "duration_s", "codec", "error_code", "error_message", "warnings",
    *_VIDEO_KEYS[5:], *(f"{obj}_{key}" for obj, keys in _NESTED.items() for key in keys),
)

_NUM = {"type": "number"}
_COUNT = {"type": "integer", "minimum": 0}

_STRING = {"type": "string"}

# One record: its keys are VideoScore's fields, its objects' keys those of their types
# (vqa.types); a test holds every key here to them. Fields may be added later, so
# additionalProperties stays open everywhere; what an "ok" record must carry beyond the common
# keys is stated in the if/then.
CONTRACT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "vqa video score record",
    "type": "object",
    "required": [f.name for f in fields(VideoScore) if f.metadata.get("required", True)],
    "properties": {
        "path": {"type": "string"},
        "status": {"enum": ["ok", "error"]},
        "score": {"type": ["number", "null"], "minimum": 0, "maximum": 100},
        "category": {"enum": [*CATEGORIES, None]},
        "defects": {"type": "array", "items": {
            "type": "object",
            "required": [f.name for f in fields(Defect)],
            "properties": {
                "type": {"enum": list(DEFECT_TYPES)},
                "severity": {"type": "number", "minimum": 0, "maximum": 1},
                "start_s": {"type": "number", "minimum": 0},
                "end_s": {"type": "number", "minimum": 0},
            },
        }},
        "video": {"oneOf": [{"type": "null"}, {
            "type": "object",
            "required": ["width", "height", "fps", "duration_s", "codec", "rotation"],
            "properties": {
                "width": {"type": "integer", "minimum": 1},
                "height": {"type": "integer", "minimum": 1},
                "fps": {"type": "number", "minimum": 0},
                "duration_s": {"type": "number", "minimum": 0},
                "codec": _STRING,
                "rotation": {"enum": [0, 90, 180, 270]},
                "frame_count": _COUNT,
                "pixel_format": _STRING,
                "size_bytes": _COUNT,
                "fingerprint": _STRING,
            },
        }]},
        "frames": {"type": "object", "properties": {key: _COUNT for key in block_keys(FramesBlock)}},
        "model": {"type": "object", "properties": {
            "name": _STRING, "version": _STRING, "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}},
        "config": {"type": "object", "properties": {
            "sampling": {"oneOf": [{"enum": ["default", "all"]},
                                   {"type": "integer", "minimum": 1}]},
            "backend": _STRING,
            "batch_size": {"type": "integer", "minimum": 1},
            "decoder": _STRING, "precision": _STRING, "mode": _STRING, "timeline": {"type": "boolean"}}},
        "sampling": {"type": "object", "properties": {
            "mode": _STRING, "requested": {"type": ["integer", "null"], "minimum": 0}, "runs": _COUNT,
            "run_length": _COUNT}},
        "error": {"oneOf": [{"type": "null"}, {
            "type": "object",
            "required": list(block_keys(ErrorBlock)),
            "properties": {"code": {"type": "string", "pattern": "^E_[A-Z_]+$"}, "message": _STRING},
        }]},
        "warnings": {"type": "array", "items": {"type": "string"}},
        # Only with --timeline (Scorer(timeline=True)): one point per sampled frame, in time order.
        "timeline": {"type": "array", "items": {
            "type": "object",
            "required": ["t_s", "score", *MODEL_DEFECTS, "black", "frozen"],
            "properties": {
                "t_s": {"type": "number"},
                "score": {"type": "number", "minimum": 0, "maximum": 100},
                **{kind: {"type": "number", "minimum": 0, "maximum": 1} for kind in MODEL_DEFECTS},
                "black": {"type": "boolean"},
                "frozen": {"type": "boolean"},
            },
        }},
    },
    "if": {"properties": {"status": {"const": "ok"}}},
    "then": {
        "properties": {
            "score": _NUM, "category": {"enum": list(CATEGORIES)},
            "video": {"type": "object"}, "error": {"type": "null"},
            "frames": {"required": list(block_keys(FramesBlock))},
            "model": {"required": list(block_keys(ModelBlock))},
            "config": {"required": ["sampling", "backend", "batch_size"]},
        },
    },
    "else": {"properties": {"error": {"type": "object"}}},
}


# Lone surrogates (a non-UTF-8 name's bytes), and the characters that str.splitlines() and
# JavaScript take for line ends although JSON allows them raw: NEL, LINE and PARAGRAPH SEPARATOR.
_ESCAPE = re.compile("[\ud800-\udfff\x85\u2028\u2029]")


def dumps(d: Mapping[str, Any]) -> str:
    """One record as JSON text, UTF-8 where possible. A path that is not valid UTF-8 carries
    its raw bytes as lone surrogates (os.fsdecode); those are written as \\udcXX escapes, so
    the line stays valid JSON and ``os.fsencode(json.loads(line)["path"])`` gives the bytes back.
    U+0085, U+2028 and U+2029 are escaped too, so a reader that splits on them sees one line."""
    text = json.dumps(d, ensure_ascii=False)
    return _ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _as_dict(record: VideoScore | Mapping[str, Any]) -> dict[str, Any]:
    return record.to_dict() if isinstance(record, VideoScore) else dict(record)


def _fmt_num(x: float) -> str:
    return f"{x:g}" if isinstance(x, int) else f"{x:.1f}"


def format_defects(defects: list[Mapping[str, Any]]) -> str:
    """Compact defect string for CSV: ``type:severity:start-end`` joined by ``;``."""
    return ";".join(f"{d['type']}:{d['severity']:g}:{d['start_s']:g}-{d['end_s']:g}"
                    for d in defects)


class Writer(ABC):
    """Streams records to ``stream``; use as a context manager so ``close()`` always runs."""

    def __init__(self, stream: TextSink):
        self.stream = stream
        self.closed = False

    @abstractmethod
    def write(self, record: VideoScore | Mapping[str, Any]) -> None: ...

    def close(self) -> None:
        self.closed = True
        self.stream.flush()

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except OSError:
            if exc_type is None:  # an error on the way out already says what went wrong
                raise


class JsonlWriter(Writer):
    def write(self, record: VideoScore | Mapping[str, Any]) -> None:
        self.stream.write(dumps(_as_dict(record)) + "\n")
        self.stream.flush()


class JsonWriter(Writer):
    """A JSON array, written element by element so memory stays flat; valid once closed."""

    def __init__(self, stream: TextSink):
        super().__init__(stream)
        self._count = 0

    def write(self, record: VideoScore | Mapping[str, Any]) -> None:
        self.stream.write("[\n  " if self._count == 0 else ",\n  ")
        self.stream.write(dumps(_as_dict(record)))
        self._count += 1
        self.stream.flush()

    def close(self) -> None:
        if not self.closed:
            self.stream.write("[]\n" if self._count == 0 else "\n]\n")
        super().close()


class CsvWriter(Writer):
    """Flat columns; the csv module quotes commas, quotes and newlines inside fields."""

    def __init__(self, stream: TextSink):
        super().__init__(stream)
        self._csv = csv.writer(stream, lineterminator="\n")
        # The csv module quotes only the line terminator's characters, so a lone carriage return
        # (a file name may hold one) would end the row for a reader: such a row is quoted whole.
        self._quoted = csv.writer(stream, lineterminator="\n", quoting=csv.QUOTE_ALL)
        self._csv.writerow(CSV_COLUMNS)
        stream.flush()

    @staticmethod
    def row(d: Mapping[str, Any]) -> list[Any]:
        video, error = d.get("video") or {}, d.get("error") or {}
        blank = lambda v: "" if v is None else v  # noqa: E731 - None reads as an empty cell
        return [d["path"], d["status"], blank(d.get("score")), blank(d.get("category")),
                format_defects(d.get("defects") or []),
                *(blank(video.get(k)) for k in _VIDEO_KEYS[:5]),
                blank(error.get("code")), blank(error.get("message")),
                "; ".join(d.get("warnings") or []),
                *(blank(video.get(k)) for k in _VIDEO_KEYS[5:]),
                *(blank((d.get(obj) or {}).get(key)) for obj, keys in _NESTED.items() for key in keys)]

    def write(self, record: VideoScore | Mapping[str, Any]) -> None:
        row = self.row(_as_dict(record))
        (self._quoted if any("\r" in v for v in row if isinstance(v, str)) else self._csv).writerow(row)
        self.stream.flush()


def _printable(text: str) -> str:
    # A newline inside a path would break the one-line-per-video layout.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class TableWriter(Writer):
    """One aligned line per video for people; ``path_width`` lines paths up when known."""

    def __init__(self, stream: TextSink, *, path_width: int | None = None):
        super().__init__(stream)
        self.path_width = min(path_width or 0, 60)

    def line(self, d: Mapping[str, Any]) -> str:
        path = _printable(d["path"]).ljust(self.path_width)
        if d["status"] != "ok":
            err = d.get("error") or {}
            text = f"{path}   error {err.get('code', ErrorCode.E_INTERNAL)}  {_printable(err.get('message', ''))}"
        else:
            defects = ", ".join(
                f"{x['type']} ({x['severity']:.2f}, {_fmt_num(x['start_s'])}\u2013{_fmt_num(x['end_s'])} s)"
                for x in d.get("defects") or []) or "none"
            text = f"{path}   score {d['score']:5.1f}   {d['category']:<9}   defects: {defects}"
        # Warnings (e.g. a substituted backend) must be visible, so they get their own lines.
        return "".join([text.rstrip(), *(f"\n    warning: {_printable(w)}"
                                         for w in d.get("warnings") or [])]) + "\n"

    def write(self, record: VideoScore | Mapping[str, Any]) -> None:
        self.stream.write(self.line(_as_dict(record)))
        self.stream.flush()


def open_writer(fmt: str, stream: TextSink, *, path_width: int | None = None) -> Writer:
    """Writer for ``fmt`` (one of ``FORMATS``). ``path_width`` only matters for "table"."""
    if fmt == "table":
        return TableWriter(stream, path_width=path_width)
    writers: dict[str, Callable[[TextSink], Writer]] = {"json": JsonWriter, "jsonl": JsonlWriter,
                                                        "csv": CsvWriter}
    if fmt not in writers:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return writers[fmt](stream)
