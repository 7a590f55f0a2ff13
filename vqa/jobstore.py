"""The job store: an SQLite file that remembers every finished record, so a job can resume.

A video's key is its identity (path bytes, size, modification time and a content fingerprint:
``vqa.files.fingerprint``) plus the model and the options that change results: change any of
them and the video is scored again. Options that only change speed (batch size, mode, workers)
are left out of the key. A scored record is stored under the identity of the file the decoder
opened (``VideoInfo``), so a file replaced between the lookup and the scoring is stored as what
was really scored. A record is committed
before it is written to the output, so a job killed at any moment loses at most the
videos it was working on; the next run takes the rest from here.

WAL journaling keeps readers off the writer's back and makes each commit one append;
``synchronous=NORMAL`` survives the process being killed (only a power cut can lose the
last commits, which would then be scored again).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import sqlite3
import stat
import time
from dataclasses import dataclass
from typing import Any

from vqa.errors import InputError, OutputError, UsageError
from vqa.files import bad_path, fingerprint, open_input

SCHEMA_VERSION = 2  # PRAGMA user_version; a store from another layout is refused, not misread
SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    path BLOB NOT NULL,          -- os.fsencode(path): any bytes a filename can hold
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,   -- vqa.files.fingerprint of the content
    config TEXT NOT NULL,        -- config_key(): model sha256 and the options that change results
    status TEXT NOT NULL,        -- "ok" or "error"
    record TEXT NOT NULL,        -- the output record as JSON (ASCII, so any path round-trips)
    scored_at REAL NOT NULL,     -- Unix time the record was stored
    PRIMARY KEY (path, size, mtime_ns, fingerprint, config)
)
"""
_COLUMNS = ["path", "size", "mtime_ns", "fingerprint", "config", "status", "record", "scored_at"]  # SCHEMA's

# The config keys that change a result. batch_size and mode only change speed (results do not
# depend on them: tests/test_engine.py), and the worker count is not in config at all.
# "timeline" is in config only when on: a record stored without its timeline is not reused.
RESULT_OPTIONS = ("sampling", "backend", "decoder", "precision", "timeline")
_SQLITE_MAGIC = b"SQLite format 3\0"
_DAMAGED_HINT = ("; if it is damaged, delete it (with its -wal and -shm) or pass another --db, and re-run: "
                 "its videos are scored again, each once")


@dataclass(frozen=True)
class Identity:
    path: bytes
    size: int
    mtime_ns: int
    fingerprint: str = ""

    @classmethod
    def of(cls, path: str) -> Identity | None:
        """The file's identity now, or None when it cannot be stat'ed or its path is no path (it
        gets a fresh record each time). The fingerprint is read only through a descriptor that
        ``vqa.files.open_input`` checked, as the decoder's is: a file found in a folder that
        now leads outside it is never read, here or anywhere."""
        if bad_path(path) is not None:
            return None
        try:
            opened = open_input(path)
        except InputError:  # not read: a FIFO, a device, outside its folder, unreadable, empty
            try:
                st = os.stat(path)
            except OSError:
                return None
            return cls(os.fsencode(path), st.st_size, st.st_mtime_ns)
        try:
            return cls(os.fsencode(path), opened.size_bytes, opened.mtime_ns,
                       fingerprint(opened.fd, opened.size_bytes))
        except OSError:
            return None
        finally:
            os.close(opened.fd)

    @classmethod
    def of_opened(cls, path: str, video) -> Identity | None:
        """The identity of the file a decoder opened to make a record (``VideoInfo``), or None
        when the record does not say (it failed before the file was read)."""
        if video is None or not getattr(video, "fingerprint", ""):
            return None
        return cls(os.fsencode(path), video.size_bytes, video.mtime_ns, video.fingerprint)


def config_key(model: dict[str, Any], config: dict[str, Any]) -> str:
    """A short stable digest of everything that changes a result: the model and the options
    in ``RESULT_OPTIONS`` (others, like the batch size, only change speed)."""
    options = {k: v for k, v in config.items() if k in RESULT_OPTIONS}
    text = json.dumps({"model": model, "config": options}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_db_path(output: str) -> str:
    """OUTPUT.vqa.db, shortened when the name would be too long for the file system with the
    "-journal", "-wal" and "-shm" that SQLite adds to it (vqa.outputs.derived_path)."""
    from vqa.outputs import derived_path
    return derived_path(output, ".vqa.db", reserve=len("-journal"))


class JobStore:
    """One job's store; one process at a time (a second job on the same store is refused).

    The store file itself is locked (``flock``, apart from SQLite's own locks), so no lock file
    is left beside it. A file that is not a vqa store of this version is refused before
    anything is written to it: no journal mode is changed, no table is made."""

    def __init__(self, path: str, *, follow_links: bool = True):
        """``follow_links=False`` for a name vqa derived (OUTPUT.vqa.db): a link planted there
        is refused, never written through, as at every other name vqa makes."""
        self.path = path
        self._db = None
        from vqa.outputs import derived_path
        if derived_path(path, "-journal") != path + "-journal":
            raise UsageError(f"the job store's name {os.path.basename(path)!r} is too long: SQLite adds "
                             "'-journal', '-wal' and '-shm' to it, past the file system's limit on a "
                             "name (255 bytes); pass a shorter --db")
        created = not os.path.lexists(path)
        locked = False  # a file we made, but another job locked first, is that job's store now
        try:
            self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                                    | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0)), 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UsageError(f"{path} is a symbolic link: the job store beside the output is never "
                                 "written through a link; remove it, or pass --db") from None
            raise UsageError(f"cannot write the job store {path}: {e.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(self._lock_fd).st_mode):
                raise UsageError(f"{path} is not a regular file; pass another --db")
            try:
                # Two jobs writing one store would each rewrite the same output from under the other.
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"another vqa job is using {path}; wait for it or pass a different --db") from None
            locked = True
            self._check(path)
            self._db = sqlite3.connect(path, isolation_level=None)  # autocommit: one statement, one commit
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            # A damaged store (a disk error, a copy cut short) is refused here, before anything is
            # scored: read mid-run it stopped the job as E_INTERNAL, every run at the same video.
            # It reads the whole file: 22 ms for 10,000 records with timelines (21 MB), page cache.
            problem = self._db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if problem != "ok":
                where = " ".join(problem.replace("*** in database main ***", "").split())
                raise sqlite3.DatabaseError(f"database disk image is malformed ({where})")
        except (sqlite3.Error, UsageError) as e:
            self._db_close_quietly()
            if created and locked:
                for leftover in (path, path + "-wal", path + "-shm"):
                    try:
                        os.unlink(leftover)
                    except OSError:
                        pass
            os.close(self._lock_fd)
            if isinstance(e, UsageError):
                raise
            # The hint for a damaged file only where SQLite says so: not for a full disk or an I/O error.
            hint = "" if isinstance(e, sqlite3.OperationalError) else _DAMAGED_HINT
            raise UsageError(f"cannot use {path} as a job store: {e}{hint}") from None

    def _check(self, path: str) -> None:
        """Refuse a file that is not a vqa store of this version, reading only."""
        head = os.pread(self._lock_fd, 100, 0)
        if not head:
            return  # new (or empty): ours to make
        if not head.startswith(_SQLITE_MAGIC):
            raise UsageError(f"{path} is not a vqa job store (not an SQLite database); pass another --db")
        uri = "file:" + os.path.abspath(path).replace("?", "%3f").replace("#", "%23") + "?mode=ro"
        db = sqlite3.connect(uri, uri=True)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                            if not r[0].startswith("sqlite_"))
            columns = [r[1] for r in db.execute("PRAGMA table_info(results)")]
        finally:
            db.close()
        if version != SCHEMA_VERSION and (version or tables):
            raise UsageError(f"{path} is not a vqa job store of this version (schema {version}, "
                             f"expected {SCHEMA_VERSION}); pass another --db")
        # Another program's database may carry the same number: the layout must be ours too.
        if tables and (tables != ["results"] or columns != _COLUMNS):
            raise UsageError(f"{path} is not a vqa job store (it holds tables {', '.join(tables)}"
                             f"{'' if tables != ['results'] else ' with other columns'}); pass another --db")

    def _db_close_quietly(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _lookup(self, column: str, identity: Identity, config: str):
        try:
            row = self._db.execute(
                f"SELECT {column} FROM results WHERE path=? AND size=? AND mtime_ns=? AND fingerprint=? AND config=?",
                (identity.path, identity.size, identity.mtime_ns, identity.fingerprint, config)).fetchone()
        except sqlite3.DatabaseError as e:  # damaged since it was opened, or an I/O error
            raise self._failed("read", e) from None
        return None if row is None else row[0]

    def status(self, identity: Identity, config: str) -> str | None:
        """"ok" or "error" for a stored record, None when there is none."""
        return self._lookup("status", identity, config)

    def get(self, identity: Identity, config: str) -> dict[str, Any] | None:
        record = self._lookup("record", identity, config)
        return None if record is None else json.loads(record)

    def put(self, identity: Identity, config: str, record: dict[str, Any]) -> None:
        """Store ``record``; a full disk (or any write failure) is ``OutputError`` (E_OUTPUT)."""
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (identity.path, identity.size, identity.mtime_ns, identity.fingerprint, config,
                 record["status"], json.dumps(record, ensure_ascii=True), time.time()))
        except sqlite3.DatabaseError as e:  # OperationalError (a full disk) or a damaged file
            raise self._failed("write", e) from None

    def _failed(self, verb: str, e: sqlite3.DatabaseError) -> OutputError:
        """E_OUTPUT saying what to do: free space (a full disk, an I/O error), or start a new store
        (a damaged file)."""
        hint = "; free some space and re-run to resume" if isinstance(e, sqlite3.OperationalError) else _DAMAGED_HINT
        return OutputError(f"cannot {verb} the job store {self.path}: {e}{hint}")

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        try:
            self._db_close_quietly()
        finally:
            os.close(self._lock_fd)  # closing the descriptor drops the lock

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
