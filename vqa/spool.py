"""Bytes given instead of a path (``Scorer.submit(data, name=...)``, the service's uploads):
spooled to a private file, scored exactly as a path is, and named in its record as the caller
named it. One rule for every door: the file is created exclusively, mode 0600, in a folder of
mode 0700, named by a counter plus the name's extension (letters and digits only); the name
itself never reaches the file system.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


_SPOOL_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,8}$")
_SPOOL_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
SPOOL_CHUNK = 1 << 20


def display_name(raw: bytes | str) -> str:
    """The last component of a client's file name, as text (undecodable bytes as surrogates):
    the name a record shows for bytes that had no path."""
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")
    return re.split(r"[/\\]", text)[-1] or "upload"


def create_private(folder: str, stem: str, name: str) -> tuple[int, str]:
    """(fd, path) of a new file in ``folder`` for content named ``name``: created exclusively,
    mode 0600, no link followed, named ``stem`` plus the name's extension (letters and digits
    only; the container probe may use it). The name itself never reaches the file system."""
    match = _SPOOL_EXTENSION.search(name)
    path = os.path.join(folder, stem + (match.group(0).lower() if match else ""))
    return os.open(path, _SPOOL_FLAGS, 0o600), path


def write_all(fd: int, data) -> int:
    view = memoryview(data).cast("B")
    total = len(view)
    while view:
        view = view[os.write(fd, view):]
    return total


def spool(data, name: str, parent: str | None = None) -> str:
    """``data`` (bytes-like, or a binary file object read to its end) into a new private
    folder (mode 0700) under ``parent`` (default: the temporary folder); the file's path.
    The caller removes the folder (``os.path.dirname``) when done."""
    folder = tempfile.mkdtemp(prefix="vqa-spool-", dir=parent)
    try:
        fd, path = create_private(folder, "video", display_name(name))
        try:
            if isinstance(data, (bytes, bytearray, memoryview)):
                write_all(fd, data)
            else:
                while chunk := data.read(SPOOL_CHUNK):
                    if not isinstance(chunk, (bytes, bytearray, memoryview)):
                        raise TypeError(f"the file object gave {type(chunk).__name__}, not bytes: "
                                        "open it in binary mode ('rb')")
                    write_all(fd, chunk)
        finally:
            os.close(fd)
        return path
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def shown_as(record: dict, path: str, name: str) -> dict:
    """A record of a spooled file as its caller knows it: ``path`` is ``name``, and the spool
    path is out of the error message."""
    record = dict(record, path=name)
    if record.get("error") and record["error"].get("message"):
        record["error"] = dict(record["error"], message=record["error"]["message"].replace(path, name))
    return record


def submit_spooled(submit: Callable[..., Future], data: Any, name: str, split: bool) -> Future:
    """``submit(path, split=...)`` on a spooled copy of ``data``; the Future's record names
    ``name``, and the copy is deleted once the video is done (or cancelled)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    if not isinstance(data, (bytes, bytearray, memoryview)) and not callable(getattr(data, "read", None)):
        raise TypeError(f"with name=, the video must be bytes or a binary file object, not {type(data).__name__}")
    spooled = spool(data, name)
    try:
        inner = submit(spooled, split=split)
    except BaseException:
        shutil.rmtree(os.path.dirname(spooled), ignore_errors=True)
        raise
    out: Future = Future()

    def done(f: Future) -> None:
        shutil.rmtree(os.path.dirname(spooled), ignore_errors=True)
        if f.cancelled():
            out.cancel()
        elif f.exception() is not None:
            out.set_exception(f.exception())
        else:
            record = f.result()
            shown = shown_as({"path": record.path, "error": record.error}, spooled, name)
            out.set_result(dataclasses.replace(record, path=shown["path"], error=shown["error"]))
    inner.add_done_callback(done)
    out.add_done_callback(lambda f: f.cancelled() and inner.cancel())
    return out
