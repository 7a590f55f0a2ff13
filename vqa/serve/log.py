"""The service's log on stderr: one line per event, as text for a person or JSON for a log
shipper (``--log-format json``).

Events: ``ready`` (address, model, backend, workers), ``access`` (one per answer), ``job``
(submitted, started, finished with counts and seconds), ``stopping`` and ``stopped``. Only
what the caller passes is written: no header (so never the token) and no body (so never an
upload's bytes). uvicorn's own warnings come through the same format (``handler``).
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import traceback
from datetime import datetime, timezone
from typing import Any, TextIO

FORMATS = ("text", "json")


def utc_iso(seconds: float | None) -> str | None:
    """A Unix time as ISO 8601 in UTC with milliseconds (``2026-12-05T09:30:00.123Z``)."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ServeLog:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None):
        self.fmt = fmt
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()

    def event(self, event: str, message: str = "", **fields: Any) -> None:
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if self.fmt == "json":
            line = json.dumps({"time": now, "event": event, **({"message": message} if message else {}), **fields},
                              ensure_ascii=True, default=str)
        else:
            pairs = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
            line = " ".join(part for part in (now, f"vqa serve: {event}", message, pairs) if part)
        with self._lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # a log that went away never stops the service
                pass

    def access(self, **fields: Any) -> None:
        self.event("access", **fields)

    def handler(self) -> logging.Handler:
        """A logging handler that writes a library's records (uvicorn's) as ``log`` events."""
        log = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                extra = {}
                if record.exc_info and record.exc_info[1] is not None:  # a bug: its traceback is for the report
                    extra["traceback"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
                log.event("log", record.getMessage(), level=record.levelname.lower(), logger=record.name, **extra)
        return Handler()


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n\r\t')) else text
