"""Request bodies into files in a private folder, under a size limit, without holding a file
in memory: ``multipart/form-data`` (``curl -F file=@clip.mp4``; every part with a filename is
one video) or a raw body (``--data-binary @clip.mp4``, named by ``?name=``).

Files are created exclusively (``O_EXCL``, mode 0600, no symlink followed) in a folder of
mode 0700 that the caller made and deletes after scoring. The client's name is kept only as
text for the record, and its extension (letters and digits only) for the file, so a name like
``../../etc/x`` or one with newlines never reaches the file system.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from python_multipart.multipart import MultipartParser, parse_options_header

from vqa.spool import create_private, display_name, write_all

MAX_FILES = 10_000  # files in one request


class TooLarge(Exception):
    """The body is over the limit (413)."""


class BadUpload(Exception):
    """The body is not what the route takes (400)."""


class SlowBody(Exception):
    """The body stopped arriving, or arrives slower than the server's minimum rate (408)."""


class Stopped(Exception):
    """The server is stopping (SIGTERM) while the body still arrives (503)."""


STOP_POLL_S = 0.25  # how often a waiting body read looks whether the server is stopping


async def paced(chunks: AsyncIterator[bytes], *, grace_s: float, min_rate: int,
                stopping: Callable[[], bool] = lambda: False) -> AsyncIterator[bytes]:
    """``chunks`` while they keep up: byte n must have come by ``grace_s + n / min_rate``
    seconds (by ``grace_s`` for the whole body when ``min_rate`` is 0); SlowBody when it has
    not, so a client that sends headers and then nothing cannot hold a place for good; Stopped
    once ``stopping()``, so a stalled upload does not hold up the server's stop."""
    started, received = time.monotonic(), 0
    source = chunks.__aiter__()
    while True:
        allowed_s = grace_s + (received / min_rate if min_rate else 0.0)
        # One read, waited for in slices: cancelling the source's __anext__ would end it.
        pending = asyncio.ensure_future(source.__anext__())
        try:
            while not pending.done():
                if stopping():
                    raise Stopped("the server is stopping: send the upload again once it is back")
                left = started + allowed_s - time.monotonic()
                if left <= 0:
                    raise SlowBody(f"the request body stopped arriving: {received} bytes in {allowed_s:.0f} s; the "
                                   f"server waits {grace_s:g} s, then for at least {min_rate} bytes/s")
                await asyncio.wait({pending}, timeout=min(left, STOP_POLL_S))
        finally:
            if not pending.done():
                pending.cancel()
        try:
            chunk = pending.result()
        except StopAsyncIteration:
            return
        received += len(chunk)
        yield chunk


@dataclass(frozen=True)
class Upload:
    path: str  # where it was written, in the private folder
    name: str  # the client's file name, for the record


class _Files:
    def __init__(self, folder: str):
        self.folder = folder
        self.done: list[Upload] = []
        self._fd: int | None = None
        self._name: tuple[str, str] | None = None

    def open(self, name: str) -> None:
        if len(self.done) >= MAX_FILES:
            raise BadUpload(f"more than {MAX_FILES} files in one request")
        self._fd, path = create_private(self.folder, f"{len(self.done):06d}", name)  # as Scorer.submit spools
        self._name = (path, name)

    def write(self, data: bytes) -> None:
        if self._fd is not None:
            write_all(self._fd, data)

    def close(self) -> None:
        if self._fd is not None and self._name is not None:
            os.close(self._fd)
            self.done.append(Upload(*self._name))
            self._fd = None


async def receive(chunks: AsyncIterator[bytes], content_type: str, folder: str, *, limit: int,
                  name: str | None = None) -> list[Upload]:
    """Write the body's files into ``folder``; TooLarge past ``limit`` bytes of body."""
    kind, params = parse_options_header(content_type or "")
    files = _Files(folder)
    received = 0
    try:
        if kind == b"multipart/form-data":
            if not params.get(b"boundary"):
                raise BadUpload("multipart/form-data without a boundary")
            parser = MultipartParser(params[b"boundary"], _callbacks(files))
        else:
            files.open(display_name(name or "upload"))
            parser = None
        async for chunk in chunks:
            received += len(chunk)
            if received > limit:
                raise TooLarge(f"the request body is over the limit of {limit} bytes")
            if parser is None:
                files.write(chunk)
            else:
                parser.write(chunk)
        if parser is not None:
            parser.finalize()
        elif received == 0:
            raise BadUpload("the request has no body: send the video as the body (curl --data-binary @clip.mp4) "
                            "or as a form part (curl -F file=@clip.mp4)")
        files.close()
    except ValueError as e:  # the multipart parser's errors are ValueErrors
        raise BadUpload(f"not a valid multipart/form-data body: {e}") from None
    finally:
        if files._fd is not None:
            os.close(files._fd)
    if not files.done:
        raise BadUpload("no file in the request: send it as a form part with a filename (curl -F file=@clip.mp4)")
    return files.done


def _callbacks(files: _Files) -> Any:  # python_multipart's MultipartCallbacks
    state = {"field": b"", "value": b"", "headers": {}}

    def header_field(data, start, end):
        state["field"] += data[start:end]

    def header_value(data, start, end):
        state["value"] += data[start:end]

    def header_end():
        state["headers"][state["field"].lower()] = state["value"]
        state["field"] = state["value"] = b""

    def headers_finished():
        _disposition, params = parse_options_header(state["headers"].get(b"content-disposition", b""))
        state["headers"] = {}
        if b"filename" in params:  # a file; other fields are ignored
            files.open(display_name(params[b"filename"]))

    return {"on_header_field": header_field, "on_header_value": header_value, "on_header_end": header_end,
            "on_headers_finished": headers_finished,
            "on_part_data": lambda data, start, end: files.write(data[start:end]),
            "on_part_end": files.close}
