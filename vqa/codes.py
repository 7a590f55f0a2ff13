"""Every stable code a record or an error can carry, with its meaning: the one registry.

``ErrorCode`` values go in ``record.error["code"]`` and ``VQAError.code``; ``WarningCode``
values start each string of ``record.warnings`` (``"W_TRUNCATED: ..."``, made by
``WarningCode.say``). Both are ``str`` enums whose ``str()`` and format are the bare code, so
a member stands wherever the code string did (JSON, CSV, f-strings, SQLite) and records are
unchanged.

The docs' code tables are made from the meanings here (``markdown_table``, through
scripts/docs/tables.py); a test holds them equal.

>>> ErrorCode.E_EMPTY == "E_EMPTY", f"{ErrorCode.E_EMPTY}", WarningCode.parse("W_CAPPED: stopped")
(True, 'E_EMPTY', (<WarningCode.W_CAPPED: 'W_CAPPED'>, 'stopped'))
"""
from __future__ import annotations

from enum import Enum


class _Code(str, Enum):
    """A code: its value is its name; ``meaning`` is the docs' text; ``per_video``: it can
    be a record's code (else it only stops a run: options, model, output)."""

    meaning: str
    per_video: bool

    def __new__(cls, code: str, meaning: str, per_video: bool = True):
        member = str.__new__(cls, code)
        member._value_ = code
        member.meaning = meaning
        member.per_video = per_video
        return member

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


class ErrorCode(_Code):
    E_NOT_FOUND = "E_NOT_FOUND", "no such file (also a dangling symlink)"
    E_EMPTY = "E_EMPTY", "the file has 0 bytes"
    E_UNREADABLE = ("E_UNREADABLE", "no permission to read it, or the OS refused to open it (e.g. a symlink "
                    "loop); also a folder inside a folder job that cannot be read")
    E_BAD_PATH = ("E_BAD_PATH", "not a regular file (a FIFO or a device would block the decoder for good); "
                  "a file found in a folder that leads outside it, when walked or when opened; a path "
                  "longer than `PATH_MAX`; a URL")
    E_NOT_VIDEO = ("E_NOT_VIDEO", "not a container FFmpeg may open: unknown bytes, a directory, a format off "
                   "the whitelist (playlists, concat scripts, still images), or an MP4 cut before its index; the "
                   "message says which was found")
    E_NO_VIDEO_STREAM = ("E_NO_VIDEO_STREAM", "a container with no video stream, e.g. audio only, also with cover "
                         "art (an attached picture is not a video stream)")
    E_TOO_MANY_PIXELS = ("E_TOO_MANY_PIXELS", "the stream declares a frame over the pixel cap (8192 x 8192, "
                         "about 67 Mpx), refused before any frame is allocated")
    E_ASPECT_RATIO = ("E_ASPECT_RATIO", "the frames have one side more than 32 times the other (e.g. 8192x1), "
                      "refused when the file is opened")
    E_DECODE = "E_DECODE", "the container opens but no frame decodes"
    E_TIMEOUT = ("E_TIMEOUT", "a decode task ran past `--timeout`: the worker and its child processes were "
                 "killed and replaced; no retry")
    E_MEMORY_LIMIT = ("E_MEMORY_LIMIT", "an allocation failed in the decode worker (its address-space limit, "
                      "`--worker-memory`), in FFmpeg, numpy or OpenCV; if the allocation killed the worker "
                      "instead, crash handling applies")
    E_WORKER_CRASH = ("E_WORKER_CRASH", "the decode worker died twice on this video (segfault, OOM kill); with "
                      "`--engine ray`, also the actor scoring it, or its node, twice")
    E_INTERNAL = "E_INTERNAL", "a bug: please report it"
    # These stop a run instead of ending up in a record.
    E_MODEL = "E_MODEL", "the model cannot be used (the root of the two below)", False
    E_MODEL_MISSING = "E_MODEL_MISSING", "a model file or the manifest is missing", False
    E_MODEL_CORRUPT = ("E_MODEL_CORRUPT", "a model file does not match its manifest, or the manifest is unreadable",
                       False)
    E_BACKEND = "E_BACKEND", "a decode or inference backend was asked for but its package is not installed", False
    E_USAGE = "E_USAGE", "options that cannot work together or are out of bounds", False
    E_OUTPUT = "E_OUTPUT", "the output or the job store cannot be written (a full disk, a read-only file system)", False
    E_RESOURCE = ("E_RESOURCE", "the machine lacks a resource the run needs (shared memory in /dev/shm for the "
                  "decode workers' ring): the run's error, never a video's", False)
    # vqa serve: these answer a request (its HTTP status in brackets), never a record.
    E_AUTH = "E_AUTH", "no bearer token, or the wrong one (401)", False
    E_NO_JOB = "E_NO_JOB", "no job with that id: never made, or deleted (404)", False
    E_NO_ROUTE = "E_NO_ROUTE", "no such route (404)", False
    E_METHOD = "E_METHOD", "the route does not take that method; `Allow` lists those it takes (405)", False
    E_SLOW_BODY = ("E_SLOW_BODY", "the request body did not arrive in time (`--body-timeout`, `--min-body-rate-kb`); "
                   "its place and partial files are given back (408)", False)
    E_TOO_LARGE = ("E_TOO_LARGE", "the request body is over the server's limit, or a job's inputs over `--max-inputs` "
                   "(413)", False)
    E_BUSY = ("E_BUSY", "the server's queue is full (429), or it is stopping (429 before a body, 503 while one "
              "arrives): retry after Retry-After seconds", False)
    E_ORIGIN = ("E_ORIGIN", "a server without a token was called with a Host or an Origin that is not its own (DNS "
                "rebinding, a cross-site page); `--allow-host` adds names (403)", False)
    E_NO_SPACE = ("E_NO_SPACE", "the server's data disk is full (or a file may grow no further): nothing was "
                  "queued; retry once there is room (507)", False)


class WarningCode(_Code):
    W_CORRUPT_FRAMES = "W_CORRUPT_FRAMES", "packets or frames failed to decode; the message has the count"
    W_TRUNCATED = ("W_TRUNCATED", "the stream ends early: fewer frames than the plan asked for, or with "
                   "`--frames all`, more than 2% fewer than the container declares, or (measured at open) "
                   "well before the declared duration; the plan then follows what is there")
    W_LENGTH = ("W_LENGTH", "the stream runs past its declared duration, or declares none and is too long to "
                "count: the plan follows the measured length, or an estimate from the file size")
    W_ROTATED = ("W_ROTATED", "the file asks for rotation (the message gives it as `video.rotation` does: "
                 "counter-clockwise, as ffprobe); frames were turned upright, width and height are as displayed")
    W_VARIABLE_FPS = ("W_VARIABLE_FPS", "frame intervals vary; time ranges follow the timestamps, not the "
                      "nominal rate; where gaps left a sampled plan's runs short, the message says how many "
                      "frames were found")
    W_SIZE_CHANGED = ("W_SIZE_CHANGED", "the frame size changed mid-stream (PyAV decoder); each frame is "
                      "scored at its own size")
    W_DECODER_FALLBACK = ("W_DECODER_FALLBACK", "`--decoder nvdec` did not decode this video (another codec "
                          "or pixel format, or NVDEC could not start): FFmpeg decoded it on the CPU, with the "
                          "same frames; the message says why")
    W_CAPPED = ("W_CAPPED", "decoding stopped at the duration cap (6 h), the frame cap (1,296,000), or a "
                "sampled plan's decode budget; the rest was not seen")

    def say(self, message: str) -> str:
        """The warning as a record carries it: ``"W_CODE: message"``."""
        return f"{self.value}: {message}"

    @classmethod
    def parse(cls, warning: str) -> tuple[WarningCode, str]:
        """The code and message of a record's warning string (ValueError for an unknown code)."""
        code, _, message = warning.partition(":")
        return cls._value2member_map_[code], message.strip()  # type: ignore[return-value]


def markdown_table(codes: type[_Code], per_video: bool = True) -> str:
    """The docs' table of ``codes`` (those a record can carry, by default)."""
    rows = [f"| `{c.value}` | {c.meaning} |" for c in codes if c.per_video == per_video]
    return "\n".join(["| code | meaning |", "|---|---|", *rows])
