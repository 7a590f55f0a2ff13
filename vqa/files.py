"""Opening an untrusted input file once, safely, and telling files apart by content.

A path is checked when it is opened, not only when a folder is walked: between the walk and
the open, a file or one of its folders can be swapped for a link to somewhere else. So
``open_input`` opens the path, then checks the descriptor it got: what it is (``fstat``) and,
for a file found by walking a folder (a ``FoundPath``), where it really is (the descriptor's
own path in /proc/self/fd) against that folder. The decoders then read that descriptor through
``/proc/self/fd/N``, a name FFmpeg cannot resolve to any other file.

``fingerprint`` hashes the size and the first and last ``FINGERPRINT_CHUNK`` bytes: it tells
apart two contents of the same size (an archive tool restores the modification time), and
costs two reads per file, whatever its size.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass

from vqa.codes import ErrorCode
from vqa.errors import InputError

# Bytes hashed at each end of the file. Container indexes and headers sit at the ends (moov,
# Cues, the first keyframes), so an edit or a re-encode of the same size changes them.
# 128 KiB + 128 KiB with SHA-256 costs about 0.25 ms a file from the page cache.
FINGERPRINT_CHUNK = 128 * 1024
_PROC_FD = "/proc/self/fd"


class FoundPath(str):
    """A path found by walking the folder ``root`` (its real path): it may only lead inside it.

    A ``str`` everywhere else (records, output), so the confinement travels with the path to
    whichever process opens it.
    """

    __slots__ = ("root",)
    root: str

    def __new__(cls, path: str, root: str) -> FoundPath:
        self = super().__new__(cls, path)
        self.root = root
        return self

    def __reduce__(self) -> tuple[type[FoundPath], tuple[str, str]]:
        return (FoundPath, (str(self), self.root))


def inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class OpenedFile:
    fd: int
    size_bytes: int
    mtime_ns: int

    @property
    def source(self) -> str:
        """A name that opens this very file again (never another one put at the path since)."""
        return f"{_PROC_FD}/{self.fd}"


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    return _URL.match(path) is not None


def bad_path(path: str) -> InputError | None:
    """E_BAD_PATH for a path no file can have (a NUL byte), told before any system call."""
    if "\0" in path:
        return InputError(f"{path!r} holds a NUL byte: no file can have that name", code=ErrorCode.E_BAD_PATH)
    return None


def missing(path: str) -> InputError:
    """The error for a path that leads to nothing: a URL is told that URLs are not inputs
    (E_BAD_PATH), anything else E_NOT_FOUND. The one rule, whichever entry was used."""
    if is_url(path):
        return InputError(f"{path} is a URL, and URLs are not inputs: download the file and score "
                          "the local copy", code=ErrorCode.E_BAD_PATH)
    return InputError(f"no such file: {path!r}; check the path", code=ErrorCode.E_NOT_FOUND)


def _fail(path: str, exc: OSError) -> InputError:
    if exc.errno == errno.ENOENT:
        return missing(path)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return InputError(f"cannot read {path!r}: permission denied", code=ErrorCode.E_UNREADABLE)
    if exc.errno == errno.ENAMETOOLONG:
        return InputError(f"{path[:80]!r}... cannot be opened: its path ({len(os.fsencode(path))} bytes) "
                          "is longer than the system allows (PATH_MAX)", code=ErrorCode.E_BAD_PATH)
    return InputError(f"cannot open {path!r}: {exc.strerror}", code=ErrorCode.E_UNREADABLE)


def _check_kind(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path!r} is a directory, expected a video file", code=ErrorCode.E_NOT_VIDEO)
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device named like a video would block the decoder's open() for good.
        raise InputError(f"{path!r} is not a regular file", code=ErrorCode.E_BAD_PATH)


def open_input(path: str) -> OpenedFile:
    """Open ``path`` for reading and check the descriptor; InputError with a stable code if
    it is not a readable, non-empty regular file, or (a ``FoundPath``) leads outside its folder.
    The caller closes ``fd``."""
    problem = bad_path(path)
    if problem is not None:
        raise problem
    try:
        _check_kind(path, os.stat(path))  # no open() on a FIFO or a device at all, if we can tell
    except OSError as exc:
        raise _fail(path, exc) from None
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _fail(path, exc) from None
    try:
        st = os.fstat(fd)  # what was opened, whatever the path leads to now
        _check_kind(path, st)
        root = getattr(path, "root", None)
        if root is not None:
            real = _real_path(fd, path)
            if not inside(real, root):
                raise InputError(f"{path!r} leads outside the folder it was found in ({root!r}) when "
                                 f"opened: to {real!r}", code=ErrorCode.E_BAD_PATH)
        if st.st_size == 0:
            raise InputError(f"{path!r} is empty (0 bytes)", code=ErrorCode.E_EMPTY)
        return OpenedFile(fd, st.st_size, st.st_mtime_ns)
    except BaseException:
        os.close(fd)
        raise


def _real_path(fd: int, path: str) -> str:
    try:
        return os.readlink(f"{_PROC_FD}/{fd}")
    except OSError:  # no /proc: the path's real path now, checked once more after opening
        return os.path.realpath(path)


def has_proc_fd() -> bool:
    return os.path.isdir(_PROC_FD)


def fingerprint(fd: int, size_bytes: int) -> str:
    """Hex digest of the size and the first and last FINGERPRINT_CHUNK bytes of open file ``fd``."""
    h = hashlib.sha256(str(size_bytes).encode())  # SHA-256: hardware-accelerated on most CPUs
    h.update(os.pread(fd, FINGERPRINT_CHUNK, 0))
    if size_bytes > FINGERPRINT_CHUNK:
        tail = max(FINGERPRINT_CHUNK, size_bytes - FINGERPRINT_CHUNK)
        h.update(os.pread(fd, FINGERPRINT_CHUNK, tail))
    return h.hexdigest()[:32]

