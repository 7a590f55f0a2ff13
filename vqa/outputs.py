"""Where a job writes: the output file, put in place whole, and the checks that keep the output
and the job store from destroying an input or each other. No click here: a script that runs
jobs can use the same rules.

Every file the product writes (``--output``, ``--report``, ``vqa report -o``) goes through
``open_destination``, so each one gets the same rules:

- a character device or a FIFO (/dev/null, a pipe) is written directly, never replaced;
  a block device, a folder or a socket is refused;
- a name for one of this process's descriptors (/dev/stdout, /dev/fd/N, /proc/self/fd/N, or
  a link to one) is written through that descriptor, whatever it leads to;
- none of these gets a job store beside it (``is_stream``): there is no file to resume;
- anything else is written to a temporary file beside it, created exclusively and without
  following links (a link planted at that name is never written through), then renamed over
  the destination, so a symlink there is replaced, never followed;
- the temporary file is locked while it is written, so a second job writing the same
  destination is refused (``OutputBusy``) instead of deleting the first one's file;
- the temporary file's name, like the job store's, is shortened with a hash when it would
  pass the file system's limit on a name (255 bytes);
- the file holds whole records only: a record that cannot be written whole (a full disk) is
  cut back off the file before the error is raised; a run stopped by a full disk does not
  replace a larger file already there (a re-run on a disk still full keeps the last output).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import sys
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol

from vqa.errors import OutputError, UsageError

if TYPE_CHECKING:  # for annotations only: no import of the writers or the input rules here
    from vqa.inputs import Input

class TextSink(Protocol):
    """What a writer needs of its stream: a text file, stdout, or RecordFile below."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


PARTIAL_SUFFIX = ".vqa-partial"  # OUTPUT is written as OUTPUT.vqa-partial, then renamed
NAME_MAX = 255  # bytes in one file name, when the file system does not say


class OutputBusy(UsageError):
    """Another live job is writing the same destination."""


def _name_max(folder: str) -> int:
    try:
        return os.pathconf(folder or ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        return NAME_MAX


def derived_path(path: str, suffix: str, *, reserve: int = 0) -> str:
    """``path + suffix``, with the file name shortened when it would pass the file system's limit
    on a name (less ``reserve`` bytes, for names SQLite derives in turn: "-wal", "-shm"). The
    shortened name keeps the start of the original and a hash of all of it, so two long names
    that share a start still get different files.

        >>> derived_path("/tmp/r.jsonl", ".vqa.db")
        '/tmp/r.jsonl.vqa.db'
    """
    folder, name = os.path.split(path)
    raw, tail = os.fsencode(name), os.fsencode(suffix)
    limit = _name_max(folder) - reserve
    if len(raw) + len(tail) <= limit:
        return path + suffix
    tag = b"~" + hashlib.sha256(raw).hexdigest()[:16].encode()
    head = raw[:max(0, limit - len(tail) - len(tag))]
    while head and head[-1] & 0xC0 == 0x80:  # no UTF-8 character cut in half
        head = head[:-1]
    if head and head[-1] >= 0xC0:
        head = head[:-1]
    return os.path.join(folder, os.fsdecode(head + tag + tail))


def partial_path(path: str) -> str:
    return derived_path(path, PARTIAL_SUFFIX)


def file_key(path: str) -> tuple[str, int, int] | tuple[str, str]:
    """What ``path`` names: (device, inode) of the file it leads to, or its real path if none."""
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def collision(output: str | None, db: str | None, inputs: Iterable[Input]) -> str | None:
    """Why the output file and the job store cannot be written as asked, or None: they are one
    file, or one of them is an input (writing would destroy it)."""
    written: dict[tuple[str, int, int] | tuple[str, str], str] = {}
    if output is not None:
        written[file_key(output)] = f"--output {output}"
    if db is not None:
        for suffix in ("", "-wal", "-shm"):
            key = file_key(db + suffix)
            if key in written:
                return f"--db {db} and {written[key]} are the same file; give them different paths"
            written[key] = f"--db {db}" if not suffix else f"the job store's {db + suffix}"
    if output is not None and file_key(partial_path(output)) in written:
        return f"--output {output} collides with the job store {db}; give them different paths"
    if any(k[0] == "inode" for k in written):
        for item in inputs:
            key = file_key(item.path)
            if key in written:
                return f"{written[key]} is also an input ({item.path}): writing it would destroy it"
    return None


class RecordFile:
    """A text stream over a descriptor that keeps only whole records in the file.

    ``write`` collects text and ``flush`` writes it: every writer in vqa.report flushes once
    per record. If a flush cannot write everything (a full disk, a file size limit), the file is
    cut back to where that flush began before the error goes up, so it ends after the last
    whole record. Text is UTF-8; surrogateescape keeps a non-UTF-8 filename's bytes (CSV)."""

    def __init__(self, fd: int):
        self.fd = fd
        st = os.fstat(fd)
        self._regular = stat.S_ISREG(st.st_mode)
        # O_APPEND (`>>`, systemd's append:, a log shared by jobs): each write lands at the end of
        # the file, wherever our offset was (often 0), and others may append between our writes.
        self._append = self._regular and bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND)
        self._end = os.lseek(fd, 0, os.SEEK_CUR) if self._regular else 0
        self._pending: list[str] = []
        self.closed = False

    def write(self, text: str) -> int:
        self._pending.append(text)
        return len(text)

    def flush(self) -> None:
        data = "".join(self._pending).encode("utf-8", "surrogateescape")
        self._pending.clear()
        if not data:
            return
        start = os.fstat(self.fd).st_size if self._append else self._end
        view, written = memoryview(data), 0
        try:
            while view:
                n = os.write(self.fd, view)
                written, view = written + n, view[n:]
        except OSError:
            if self._regular:  # no half record left behind
                with suppress(OSError):
                    # Appending, cut only what is ours: from an offset of 0, the whole file went;
                    # after another writer's records, those would go. Then the half record stays.
                    if not self._append or os.fstat(self.fd).st_size == start + written:
                        os.ftruncate(self.fd, start)
                    if not self._append:
                        os.lseek(self.fd, start, os.SEEK_SET)
            raise
        self._end = start + len(data)

    def discard(self) -> None:
        """Drop what was written since the last flush (a record cut short by an error)."""
        self._pending.clear()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.flush()
        finally:
            os.close(self.fd)

    def fileno(self) -> int:
        return self.fd


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


_FD_NAME = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd|proc/(\d+)/fd)/(\d+)")
_MAX_HOPS = 40  # links followed before a name is taken for a loop (the kernel's own limit)


def _descriptor(path: str) -> int | None:
    """This process's descriptor that ``path`` names, through any links (/dev/stdout is a link
    to /proc/self/fd/1), or None. Such a name must be written through: replacing it would replace
    the link (as root, /dev/stdout itself), and what it leads to is often no file at all (a pipe)."""
    for _ in range(_MAX_HOPS):
        m = _FD_NAME.fullmatch(os.path.normpath(path)) if os.path.isabs(path) else None
        if m and (m.group(1) is None or int(m.group(1)) == os.getpid()):
            try:
                os.fstat(int(m.group(2)))
            except OSError:
                return None
            return int(m.group(2))
        try:
            target = os.readlink(path)
        except OSError:
            return None
        path = os.path.join(os.path.dirname(path), target)
    return None


def is_stream(path: str) -> bool:
    """True when ``path`` is written in place, not as a file put there whole: a character device,
    a FIFO, one of this process's descriptors. A job writing there gets no store beside it."""
    if _descriptor(path) is not None:
        return True
    try:
        return _direct(path)
    except UsageError:
        return False  # refused when it is opened, with the reason


def _direct(path: str) -> bool:
    """True for a destination written in place (a character device or a FIFO), False for a
    file replaced whole (a regular file, a link to one, or nothing yet); UsageError otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISREG(mode):
        return False
    kind = "a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else "not a regular file"
    raise UsageError(f"{path} is {kind}: give a file name (or a character device or FIFO to write to)")


def _claim(partial: str, output: str) -> int:
    """Create ``partial`` exclusively, without following a link, and lock it; OutputBusy when a
    live job holds it. A file found there that no job holds is a killed run's leftover."""
    busy = OutputBusy(f"another vqa job is writing {output} (it holds {partial}); wait for it, "
                      "or write to another file")
    try:
        fd = os.open(partial, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        pass
    except OSError:  # a link (ELOOP) or something we may not open: not a live job's file
        with suppress(FileNotFoundError):
            os.unlink(partial)
    else:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise busy from None
        finally:
            os.close(fd)
        with suppress(FileNotFoundError):
            os.unlink(partial)  # a killed run's leftover
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666)
    except FileExistsError:  # another job made it since we looked
        raise busy from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Between the create and the lock, a job starting now could take it for a leftover.
        if os.lstat(partial).st_ino != os.fstat(fd).st_ino:
            raise busy
    except (BlockingIOError, FileNotFoundError, OutputBusy):
        os.close(fd)
        raise busy from None
    return fd


@contextmanager
def open_destination(path: str, *, keep_on_error: bool) -> Iterator[RecordFile]:
    """A ``RecordFile`` that ends up at ``path`` (see the module's rules). When the block
    raises, the records flushed so far are put in place anyway if ``keep_on_error`` (a job's
    records so far are valid), else dropped and ``path`` left as it was (a half page is no page).
    A record written but not flushed when the block raised is never kept."""
    if not str(path).strip():
        raise UsageError("the output's name is empty: give a file name")
    fd = _descriptor(path)
    if fd is not None:
        f = RecordFile(os.dup(fd))  # the descriptor's own file position, as stdout's
        with _closing(f):
            yield f
        return
    if _direct(path):
        f = RecordFile(os.open(path, os.O_WRONLY | os.O_NOCTTY | _CLOEXEC))
        with _closing(f):
            yield f
        return
    partial = partial_path(path)
    f = RecordFile(_claim(partial, path))
    with _closing(f):
        try:
            yield f
            f.flush()
        except BaseException as e:
            f.discard()
            # Already failing (a full disk, Ctrl-C): a second error must not hide the first.
            with suppress(OSError):
                if keep_on_error and not _cut_short_by_the_disk(e, partial, path):
                    os.replace(partial, path)
                else:
                    os.unlink(partial)
            raise
        os.replace(partial, path)  # still locked: nobody takes it for a leftover meanwhile


def _cut_short_by_the_disk(error: BaseException, partial: str, path: str) -> bool:
    """True when a run stopped because a file could not be written (a full disk: OSError, or
    the job's OutputError) and ``path`` holds more than the partial file: a re-run on a disk
    still full would otherwise swap a whole earlier output for a few records (83 for 0)."""
    if not isinstance(error, (OSError, OutputError)):
        return False
    try:
        return os.stat(path).st_size > os.stat(partial).st_size
    except OSError:
        return False


@contextmanager
def _closing(f: RecordFile) -> Iterator[None]:
    try:
        yield
    except BaseException:
        f.discard()
        with suppress(OSError):
            f.close()
        raise
    f.close()


@contextmanager
def open_output(output: str | None) -> Iterator[TextSink]:
    """stdout (left open) or a file put in place by ``open_destination``, kept on an error.
    Redirected stdout that is a regular file keeps whole records too."""
    if output not in (None, "-"):
        with open_destination(output, keep_on_error=True) as f:
            yield f
        return
    try:
        fd = sys.stdout.fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):  # not a real file (a test runner's buffer)
        regular = False
    if regular:
        sys.stdout.flush()
        f = RecordFile(os.dup(fd))
        with _closing(f):
            yield f
        return
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="surrogateescape")
    yield sys.stdout
