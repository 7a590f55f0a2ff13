"""Jobs, their inputs and their records, in one SQLite file (``DATA/jobs.db``).

A job's inputs are expanded once, when it is submitted, and kept here: a restarted server
carries on with the same list, skipping the inputs that already have a record (the records
themselves are also in the results store, ``vqa.jobstore``, keyed by file identity, so a
video whose record was stored but not yet listed here is not scored again). Records stay
until the job is deleted.

WAL: one writer connection (behind a lock: request threads add jobs, the runner adds
records) and one read connection per reading thread, so a slow reader never holds up a write.
"""
from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vqa.errors import UsageError
from vqa.files import FoundPath
from vqa.inputs import Input

from .log import utc_iso

QUEUED, RUNNING, DONE = "queued", "running", "done"
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,          -- "paths" or "upload"
    state TEXT NOT NULL,         -- queued, running, done
    total INTEGER NOT NULL,
    created REAL NOT NULL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS inputs (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    path BLOB NOT NULL,          -- os.fsencode: any bytes a name can hold
    root BLOB,                   -- the folder it must lead into when opened (FoundPath), or NULL
    name TEXT,                   -- an upload: the name its record shows instead of the path (_name_in)
    error TEXT,                  -- [code, message] when it failed before scoring
    PRIMARY KEY (job, seq)
);
CREATE TABLE IF NOT EXISTS callbacks (
    job TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0  -- 1 once answered 2xx, or given up
);
CREATE TABLE IF NOT EXISTS records (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    code TEXT,
    record TEXT NOT NULL,        -- the output record as JSON (ASCII)
    PRIMARY KEY (job, seq)
);
"""


@dataclass(frozen=True)
class JobInput:
    seq: int
    input: Input
    name: str | None  # an upload's name as the client sent it


class JobDB:
    def __init__(self, path: str):
        self.path = path
        # One server per data folder: the file itself is locked (SQLite's own locks are fcntl's).
        try:
            self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) |
                                    getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as e:
            raise UsageError(f"cannot open the job list {path}: {e.strerror}; {_MOVE_ASIDE}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise UsageError(f"another vqa serve is using {os.path.dirname(path)}; stop it or pass another --data"
                             ) from None
        try:
            self._write = self._connect()
            self._write.executescript(SCHEMA)
            _check_schema(self._write)
        except sqlite3.Error as e:
            os.close(self._lock_fd)
            raise UsageError(f"{path} is not a vqa serve job list ({e}); {_MOVE_ASIDE}") from None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []  # closed with the store, so the checkpoint is complete

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _read(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._connect()
            with self._lock:
                self._readers.append(db)
        return db

    # -- writes ----------------------------------------------------------------------------

    def add(self, job_id: str, kind: str, inputs: list[tuple[Input, str | None]], callback: str | None = None
            ) -> None:
        rows = []
        for seq, (item, name) in enumerate(inputs):
            root = getattr(item.path, "root", None)
            rows.append((job_id, seq, os.fsencode(item.path), None if root is None else os.fsencode(root),
                         _name_in(name), None if item.error is None else json.dumps(list(item.error))))
        with self._transaction() as db:
            db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, NULL)",
                       (job_id, kind, QUEUED, len(inputs), time.time()))
            db.executemany("INSERT INTO inputs VALUES (?, ?, ?, ?, ?, ?)", rows)
            if callback is not None:
                db.execute("INSERT INTO callbacks VALUES (?, ?, 0)", (job_id, callback))

    def callback(self, job_id: str) -> str | None:
        row = self._read().execute("SELECT url FROM callbacks WHERE job=? AND delivered=0", (job_id,)).fetchone()
        return None if row is None else row[0]

    def undelivered(self) -> list[tuple[str, str]]:
        """(job, url) of the done jobs whose callback has not been answered yet."""
        return self._read().execute("SELECT c.job, c.url FROM callbacks c JOIN jobs j ON j.id=c.job "
                                    "WHERE c.delivered=0 AND j.state=?", (DONE,)).fetchall()

    def delivered(self, job_id: str) -> None:
        with self._lock:
            self._write.execute("UPDATE callbacks SET delivered=1 WHERE job=?", (job_id,))

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """The writer in one transaction, rolled back on any error: left open, it would refuse
        every later write ("cannot start a transaction within a transaction")."""
        with self._lock:
            self._write.execute("BEGIN")
            try:
                yield self._write
                self._write.execute("COMMIT")
            except BaseException:
                if self._write.in_transaction:  # a failed COMMIT may have ended it already
                    self._write.execute("ROLLBACK")
                raise

    def put_record(self, job_id: str, seq: int, record: dict[str, Any]) -> None:
        code = (record.get("error") or {}).get("code")
        with self._lock:
            self._write.execute("INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?)",
                                (job_id, seq, record["status"], code, json.dumps(record, ensure_ascii=True)))

    def set_state(self, job_id: str, state: str) -> None:
        with self._lock:
            self._write.execute("UPDATE jobs SET state=?, finished=? WHERE id=?",
                                (state, time.time() if state == DONE else None, job_id))

    def requeue_running(self) -> int:
        """At start-up: jobs a stopped server was running go back to the queue."""
        with self._lock:
            return self._write.execute("UPDATE jobs SET state=? WHERE state=?", (QUEUED, RUNNING)).rowcount

    def delete(self, job_id: str) -> bool:
        with self._transaction() as db:
            gone = db.execute("DELETE FROM jobs WHERE id=?", (job_id,)).rowcount
            db.execute("DELETE FROM inputs WHERE job=?", (job_id,))
            db.execute("DELETE FROM records WHERE job=?", (job_id,))
            db.execute("DELETE FROM callbacks WHERE job=?", (job_id,))
        return bool(gone)

    # -- reads (any thread) ----------------------------------------------------------------

    def queued(self) -> list[str]:
        return [r[0] for r in self._read().execute(
            "SELECT id FROM jobs WHERE state=? ORDER BY created, id", (QUEUED,))]

    def unfinished(self) -> list[str]:
        return [r[0] for r in self._read().execute("SELECT id FROM jobs WHERE state != ?", (DONE,))]

    def job(self, job_id: str) -> dict[str, Any] | None:
        row = self._read().execute("SELECT id, kind, state, total, created, finished FROM jobs WHERE id=?",
                                   (job_id,)).fetchone()
        if row is None:
            return None
        job = dict(zip(("id", "kind", "state", "total", "created", "finished"), row))
        job["created"], job["finished"] = utc_iso(job["created"]), utc_iso(job["finished"])  # ISO 8601, UTC
        counts = dict(self._read().execute("SELECT status, COUNT(*) FROM records WHERE job=? GROUP BY status",
                                           (job_id,)).fetchall())
        job["done"] = sum(counts.values())
        job["ok"], job["failed"] = counts.get("ok", 0), counts.get("error", 0)
        job["errors_by_code"] = dict(self._read().execute(
            "SELECT code, COUNT(*) FROM records WHERE job=? AND code IS NOT NULL GROUP BY code ORDER BY code",
            (job_id,)).fetchall())
        return job

    def jobs(self) -> list[dict[str, Any]]:
        ids = [r[0] for r in self._read().execute("SELECT id FROM jobs ORDER BY created, id")]
        return [j for j in map(self.job, ids) if j is not None]

    def pending(self, job_id: str) -> list[JobInput]:
        """The job's inputs that have no record yet, in order."""
        rows = self._read().execute(
            "SELECT i.seq, i.path, i.root, i.name, i.error FROM inputs i LEFT JOIN records r "
            "ON r.job=i.job AND r.seq=i.seq WHERE i.job=? AND r.seq IS NULL ORDER BY i.seq", (job_id,))
        out = []
        for seq, path, root, name, error in rows:
            path = os.fsdecode(path)
            if root is not None:
                path = FoundPath(path, os.fsdecode(root))
            out.append(JobInput(seq, Input(path, None if error is None else tuple(json.loads(error))), _name_out(name)))
        return out

    def records(self, job_id: str, after: int = -1, limit: int = 500) -> list[tuple[int, str]]:
        """(seq, record JSON) with seq > ``after``, in order, at most ``limit``."""
        return self._read().execute(
            "SELECT seq, record FROM records WHERE job=? AND seq>? ORDER BY seq LIMIT ?",
            (job_id, after, limit)).fetchall()

    def iter_records(self, job_id: str, *, confined: bool = False) -> Iterator[dict[str, Any]]:
        """The job's records in order. ``confined``: each record's path is its input's, as a
        FoundPath when the input was confined to a root, so whatever opens the file again (a
        report's thumbnails) makes the same folder check as scoring did."""
        roots = self._roots(job_id) if confined else {}
        after = -1
        while rows := self.records(job_id, after):
            for seq, text in rows:
                record = json.loads(text)
                if seq in roots:
                    record["path"] = roots[seq]
                yield record
            after = rows[-1][0]

    def _roots(self, job_id: str) -> dict[int, FoundPath]:
        return {seq: FoundPath(os.fsdecode(path), os.fsdecode(root)) for seq, path, root in self._read().execute(
            "SELECT seq, path, root FROM inputs WHERE job=? AND root IS NOT NULL AND name IS NULL", (job_id,))}

    def close(self) -> None:
        """Checkpointed and out of WAL mode first, so jobs.db alone holds everything (a backup
        of that one file is complete) and no -wal or -shm file is left beside it."""
        with self._lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
            try:
                self._write.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._write.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.Error:
                pass  # a reader still open, or a full disk: the WAL stays and SQLite replays it next time
            self._write.close()
        os.close(self._lock_fd)


_MOVE_ASIDE = ("restore it from a backup, or move it aside (with any -wal and -shm beside it) and start "
               "again with no jobs")
_COLUMNS = {"jobs": ["id", "kind", "state", "total", "created", "finished"],
            "inputs": ["job", "seq", "path", "root", "name", "error"],
            "records": ["job", "seq", "status", "code", "record"], "callbacks": ["job", "url", "delivered"]}


def _check_schema(db: sqlite3.Connection) -> None:
    """sqlite3.DatabaseError for a database whose tables are not this version's (another
    program's file named jobs.db would fail at the first job, not at start-up)."""
    for table, columns in _COLUMNS.items():
        found = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
        if found != columns:
            raise sqlite3.DatabaseError(f"its {table} table has columns {', '.join(found)}")


def _name_in(name: str | None) -> bytes | None:
    """An upload's name as SQLite takes it: UTF-8 bytes, with any lone surrogate (the client's
    undecodable bytes, as os.fsdecode keeps them) passed through, which TEXT would refuse."""
    return None if name is None else name.encode("utf-8", "surrogatepass")


def _name_out(name: bytes | str | None) -> str | None:
    """The name exactly as it was given (a data folder of an older version holds TEXT)."""
    return name.decode("utf-8", "surrogatepass") if isinstance(name, bytes) else name
