"""The job store: an SQLite file that remembers every finished record, so a job can resume.

A video's key is its identity (path bytes, size, modification time) plus the model and
options in force: change any of them and the video is scored again. A record is committed
before it is written to the output, so a job killed at any moment loses at most the
videos it was working on; the next run takes the rest from here.

WAL journaling keeps readers off the writer's back and makes each commit one append;
``synchronous=NORMAL`` survives the process being killed (only a power cut can lose the
last commits, which would then be scored again).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from vqa.errors import UsageError

SCHEMA_VERSION = 1  # PRAGMA user_version; a store from another layout is refused, not misread
SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    path BLOB NOT NULL,          -- os.fsencode(path): any bytes a filename can hold
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    config TEXT NOT NULL,        -- config_key(): model sha256 and options
    status TEXT NOT NULL,        -- "ok" or "error"
    record TEXT NOT NULL,        -- the output record as JSON (ASCII, so any path round-trips)
    scored_at REAL NOT NULL,     -- Unix time the record was stored
    PRIMARY KEY (path, size, mtime_ns, config)
)
"""


@dataclass(frozen=True)
class Identity:
    path: bytes
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> Identity | None:
        """The file's identity now, or None when it cannot be stat'ed (it gets a fresh record)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        return cls(os.fsencode(path), st.st_size, st.st_mtime_ns)


def config_key(model: dict[str, Any], config: dict[str, Any]) -> str:
    """A short stable digest of everything that changes a result."""
    text = json.dumps({"model": model, "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_db_path(output: str) -> str:
    return output + ".vqa.db"


class JobStore:
    """One job's store; one process at a time (a second job on the same store is refused)."""

    def __init__(self, path: str):
        self.path = path
        # A lock file beside the database: two jobs writing one store would each rewrite
        # the same output file from under the other.
        try:
            self._lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise UsageError(f"cannot write the job store {path}: {e.strerror}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise UsageError(f"another vqa job is using {path}; wait for it or pass a different --db") from None
        try:
            self._db = sqlite3.connect(path, isolation_level=None)  # autocommit: one statement, one commit
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            tables = self._db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
            if version != SCHEMA_VERSION and (version or tables):
                raise UsageError(f"{path} is not a vqa job store of this version (schema {version}, "
                                 f"expected {SCHEMA_VERSION}); pass another --db")
            self._db.execute(SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (sqlite3.DatabaseError, UsageError) as e:
            self._db_close_quietly()
            os.close(self._lock_fd)
            if isinstance(e, UsageError):
                raise
            raise UsageError(f"cannot use {path} as a job store: {e}") from None

    def _db_close_quietly(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()

    def _lookup(self, column: str, identity: Identity, config: str):
        row = self._db.execute(
            f"SELECT {column} FROM results WHERE path=? AND size=? AND mtime_ns=? AND config=?",
            (identity.path, identity.size, identity.mtime_ns, config)).fetchone()
        return None if row is None else row[0]

    def status(self, identity: Identity, config: str) -> str | None:
        """"ok" or "error" for a stored record, None when there is none."""
        return self._lookup("status", identity, config)

    def get(self, identity: Identity, config: str) -> dict[str, Any] | None:
        record = self._lookup("record", identity, config)
        return None if record is None else json.loads(record)

    def put(self, identity: Identity, config: str, record: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
            (identity.path, identity.size, identity.mtime_ns, config, record["status"],
             json.dumps(record, ensure_ascii=True), time.time()))

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def close(self) -> None:
        try:
            self._db.close()
        finally:
            os.close(self._lock_fd)  # closing the descriptor drops the lock

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
