"""Helpers for the parallel-engine tests: functions a spawned process can import by reference,
shared-memory bookkeeping from /dev/shm and /proc, and a child script to interrupt or kill.

Run as a script it is the child: ``python engine_helpers.py CLIP [CLIP...]`` scores the clips
with ``Scorer(workers=2, frames="all")``, printing ``SCORING <pid>`` first and one line per
record, so a test can Ctrl-C or SIGKILL it in the middle of a job.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "psm_"  # how multiprocessing.shared_memory names its segments on Linux
STARTED = "SCORING"
JOB_DEADLINE_S = 30  # a job that takes longer than this is hung, not slow
# The child's first lines: start-up, workers and model, then a 1 s clip. Under a load of 13 on
# 2 cores that took up to 21 s; far longer means it is wedged, and the test says so.
CHILD_LINE_S = 120


# --- a private mount namespace, for a small file system ---------------------------------

def private_mounts() -> list[str] | None:
    """A command prefix that runs its command in a mount namespace of its own, where it may
    mount a small tmpfs (over a folder, or over /dev/shm) that nobody else sees; None where
    that is not allowed (neither root nor unprivileged user namespaces)."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /dev/shm"], capture_output=True)
    return prefix if probe.returncode == 0 else None


# --- shared memory seen from the file system ---------------------------------------------

def psm_segments() -> set[str]:
    """Names (without the leading '/') of every Python shared-memory segment on the machine."""
    return {p.name for p in SHM_DIR.glob(SHM_PREFIX + "*")}


def mapped_segments(pid: int) -> set[str]:
    """The psm_* segments process ``pid`` has mapped (empty if it is gone or unreadable)."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.rsplit("/", 1)[-1].split()[0] for line in text.splitlines()
            if f"{SHM_DIR}/{SHM_PREFIX}" in line}


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc, so it also works for a process we did not start)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(predicate, timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


# --- functions run in spawned processes (importable by reference) --------------------------

def pattern(slot: int, count: int, shape: tuple[int, ...]) -> np.ndarray:
    """Deterministic bytes for a slot, different for every slot."""
    rng = np.random.default_rng(1000 + slot)
    return rng.integers(0, 256, (count, *shape), dtype=np.uint8)


def fill_slots(spec, done, count: int) -> None:
    """Worker side of the round trip: write ``pattern`` into every slot, report each one."""
    from vqa.batch import RingWriter

    writer = RingWriter(spec)
    try:
        for slot in range(spec.slots):
            writer.slot(slot)[:count] = pattern(slot, count, spec.slot_shape[1:])
            done.put(slot)
    finally:
        writer.close()


# --- a scorer's job and its workers ------------------------------------------------------

def run_with_deadline(scorer, paths: list[str], deadline_s: float = JOB_DEADLINE_S) -> list:
    """list(scorer.score_many(paths)) in a thread; fails (and unwedges the job) if it hangs."""
    out: list = []
    errors: list[BaseException] = []

    def work():
        try:
            out.extend(scorer.score_many(paths))
        except BaseException as e:  # noqa: BLE001 - reported in the test's thread
            errors.append(e)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        pool = scorer._pool  # a hung job polls its pool forever: make the next poll raise

        def abort(*_):
            raise TimeoutError("test deadline")

        if pool is not None:
            pool.get = abort
        thread.join(10)
        pytest.fail(f"score_many did not finish within {deadline_s} s ({len(out)} of {len(paths)} records)")
    if errors:
        raise errors[0]
    return out


def read_line(child, timeout_s: float = CHILD_LINE_S) -> str:
    """The child's next stdout line, or a test failure (child killed, its stderr shown) when
    none comes within ``timeout_s``: a wedged child must not hang the test run."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(child.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not box:
        os.killpg(child.pid, signal.SIGKILL)  # its own session (start_new_session): workers included
        pytest.fail(f"no line from the child within {timeout_s:g} s; stderr: {child.communicate()[1][-2000:]}")
    return box[0]


def decode_workers(scorer=None) -> list:
    """Live decode worker processes: the given scorer's, else every one this process started
    (session-scoped scorers of other test files may hold workers of their own)."""
    if scorer is not None:
        return [w.process for w in scorer._pool._workers if w.process.is_alive()] if scorer._pool else []
    return [p for p in mp.active_children() if p.name == "vqa-decode"]


# --- nothing is left behind --------------------------------------------------------------

def segments_mapped_by_others(ours: set[int]) -> set[str]:
    """psm_* segments some live process outside ``ours`` has mapped (other test runs)."""
    names: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid not in ours:
            names |= mapped_segments(pid)
    return names


def assert_no_segment_left(before: set[str], ours: set[str], pids: set[int], wait_s: float = 5.0) -> None:
    """Neither the segments seen in use (``ours``) nor any new unowned psm_* segment remains."""
    def clean():
        left = psm_segments()
        return not (left & ours) and not (left - before - segments_mapped_by_others(pids))

    if not wait_until(clean, wait_s, poll_s=0.2):
        left = psm_segments()
        pytest.fail(f"shared memory left in /dev/shm: ours {sorted(left & ours)}, "
                    f"new {sorted(left - before - segments_mapped_by_others(pids))}")


# --- the child script -------------------------------------------------------------------

def _child(paths: list[str]) -> None:
    from vqa import Scorer

    # Ctrl-C as in a terminal, however the test run was started: a shell's background job
    # (`pytest &`, nohup) starts with SIGINT ignored, its children inherit that, and Python
    # then installs no KeyboardInterrupt handler; the Ctrl-C test failed that way.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    with Scorer(workers=2, frames="all", threads=1) as scorer:
        print(STARTED, os.getpid(), flush=True)
        for record in scorer.score_many(paths):
            print("RECORD", record.status, record.score, flush=True)
    print("CLOSED", flush=True)


def stored(out) -> dict[bytes, float]:
    """The job store next to output ``out``: path -> scored_at (empty when there is none, or
    while the job is still making it: the file exists a moment before its table does)."""
    from vqa.jobstore import default_db_path
    db = default_db_path(str(out))
    if not os.path.exists(db):
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # read-only: never makes or changes it
    try:
        return dict(conn.execute("SELECT path, scored_at FROM results"))
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return {}
        raise
    finally:
        conn.close()


if __name__ == "__main__":
    _child(sys.argv[1:])
