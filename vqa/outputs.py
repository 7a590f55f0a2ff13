"""Where a job writes: the output file, put in place whole, and the checks that keep the output
and the job store from destroying an input or each other. No click here: a script that runs
jobs can use the same rules."""
from __future__ import annotations

import os
import stat
import sys
from contextlib import contextmanager, suppress
from typing import Iterator, TextIO

PARTIAL_SUFFIX = ".vqa-partial"  # OUTPUT is written as OUTPUT.vqa-partial, then renamed


def file_key(path: str):
    """What ``path`` names: (device, inode) of the file it leads to, or its real path if none."""
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def collision(output: str | None, db: str | None, inputs) -> str | None:
    """Why the output file and the job store cannot be written as asked, or None: they are one
    file, or one of them is an input (writing would destroy it)."""
    written = {}
    if output is not None:
        written[file_key(output)] = f"--output {output}"
    if db is not None:
        for suffix in ("", "-wal", "-shm"):
            key = file_key(db + suffix)
            if key in written:
                return f"--db {db} and {written[key]} are the same file; give them different paths"
            written[key] = f"--db {db}" if not suffix else f"the job store's {db + suffix}"
    if output is not None and file_key(output + PARTIAL_SUFFIX) in written:
        return f"--output {output} collides with the job store {db}; give them different paths"
    if any(k[0] == "inode" for k in written):
        for item in inputs:
            key = file_key(item.path)
            if key in written:
                return f"{written[key]} is also an input ({item.path}): writing it would destroy it"
    return None


@contextmanager
def open_output(output: str | None) -> Iterator[TextIO]:
    """stdout (left open) or a UTF-8 file; newline='' so CSV keeps newlines inside fields.

    A file is written as OUTPUT.vqa-partial beside it and renamed over OUTPUT when the run
    ends (also when it stops early: what was written is valid), so an existing OUTPUT is only
    replaced whole, and a symlink at OUTPUT is replaced, never written through. A device or
    FIFO (/dev/null, a pipe) is written directly."""
    if output in (None, "-"):
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(errors="surrogateescape")
        yield sys.stdout
        return
    # surrogateescape: a non-UTF-8 filename goes into CSV as the bytes it has on disk
    # (the JSON writers escape it instead, see vqa.report).
    text = dict(encoding="utf-8", errors="surrogateescape", newline="")
    try:
        special = not stat.S_ISREG(os.stat(output).st_mode)
    except OSError:
        special = False
    if special:
        f, partial = open(output, "w", **text), None
    else:
        partial = output + PARTIAL_SUFFIX
        with suppress(FileNotFoundError):
            os.unlink(partial)  # left by a killed run
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o666)
        f = os.fdopen(fd, "w", **text)
    try:
        yield f
    except BaseException:
        # Already failing (a full disk, Ctrl-C): a second error from flushing must not hide it.
        with suppress(OSError):
            f.close()
        if partial is not None:
            with suppress(OSError):
                os.replace(partial, output)
        raise
    f.close()
    if partial is not None:
        os.replace(partial, output)
