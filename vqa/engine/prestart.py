"""A decode worker started as ``vqa score`` starts, before the command has imported its
libraries or parsed its options (issue 18, start-up).

A spawned worker spends about 0.3 s of a core starting Python and importing NumPy, OpenCV and
its decoder before it can open a video, and the parent spent about as long importing click,
the options and the pipeline before it spawned one: on 2 cores the two waited for each other.
``start`` spawns a bare worker first; it imports what every worker needs while the parent
imports the rest, then waits for its settings (the ring, its slots, the memory limit, the
model's geometry, the decoder). ``vqa.engine.processes.WorkerPool`` takes it as its first
worker (``take``) and sends them; from there it is a worker like any other. One that nothing
took (``vqa score --help``, a usage error, a job with nothing to score) is stopped by
``discard``. Only the command starts one: a library caller's pool spawns its own as before.

Imported by the command before anything else, so it imports nothing heavy itself.
"""
from __future__ import annotations

import os
import sys

# vqa.engine.worker.WORKER_NAME, which guard_spawned_import reads; not imported from there,
# which imports NumPy (tests/engine/test_startup.py holds the two equal).
WORKER_NAME = "vqa-decode"

_waiting: tuple | None = None  # (process, parent's end of its pipe, the pid that started it)


def start() -> None:
    """Spawn a bare decode worker, unless one is waiting already."""
    global _waiting
    if _waiting is not None:
        return
    import multiprocessing as mp

    from ..lifecycle import keep_standard_descriptors

    keep_standard_descriptors()  # its pipe must not land at 0, 1 or 2 (a command run with `2>&-`)
    ctx = mp.get_context("spawn")
    parent_end, child_end = ctx.Pipe()
    process = ctx.Process(target=_wait_for_settings, args=(child_end,), daemon=True, name=WORKER_NAME)
    try:
        process.start()
    except OSError:  # no process to be had now: the pool spawns its own, and says why if it cannot
        parent_end.close()
        return
    finally:
        child_end.close()
    _waiting = (process, parent_end, os.getpid())


def take(ctx) -> tuple | None:
    """The waiting worker and the parent's end of its pipe, for a pool of ``ctx``'s start
    method (spawn, as it was started), or None; it is taken once, and only by its parent."""
    global _waiting
    if _waiting is None or ctx.get_start_method() != "spawn" or _waiting[2] != os.getpid():
        return None
    (process, conn, _pid), _waiting = _waiting, None
    if not process.is_alive():  # killed meanwhile: the pool spawns one of its own
        process.join()
        conn.close()
        return None
    return process, conn


def discard() -> None:
    """Stop a worker that nothing took: it holds nothing yet (no ring, no file), so it is killed."""
    global _waiting
    if _waiting is None or _waiting[2] != os.getpid():
        return
    (process, conn, _pid), _waiting = _waiting, None
    process.kill()
    process.join()
    conn.close()


def _wait_for_settings(conn) -> None:
    """The bare worker: import what every worker needs, then run as the worker the settings
    describe (vqa.engine.worker.worker_main); the parent gone or ``None`` ends it."""
    try:
        from .worker import ignore_ctrl_c, preload, worker_main

        ignore_ctrl_c()
        preload()
        settings = conn.recv()
    except (EOFError, OSError, KeyboardInterrupt):
        settings = None
    if settings is None:
        conn.close()
        sys.stdout.flush()
        os._exit(0)
    worker_main(conn, *settings)
