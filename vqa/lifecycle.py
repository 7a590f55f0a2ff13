"""Who may use and release what a Scorer holds: the process that made it, and any thread but
the engine's own.

Forks. Decode workers, the shared-memory ring, the dispatcher thread and the exit hooks belong
to the process that made them. After ``os.fork()`` the child has copies of the Python objects
but not the threads, and the workers are not its children. So every release (``close``, the
exit hooks, a dropped Scorer's collection) acts only in the owning process, and using a Scorer
in a forked child raises ``ForkedError`` at once instead of waiting for a thread that is not
there. A child makes its own Scorer (``vqa.score`` does that by itself).

Callbacks. A future's done-callbacks run on the thread that finishes it: the engine's
dispatcher. A call there that waits for a video (``score``, ``future.result()`` on a pending
future) waits for that thread itself; ``close`` would join it. Both raise ``CallbackError`` at
once, and the engine goes on. ``submit`` from a callback works.

Standard descriptors. A host started with descriptors 0, 1 or 2 closed (a daemon, a cron line
with ``>&- 2>&-``) would have the next files opened land there: the ring's shared memory, a
worker's socket. Whatever then wrote to "stderr" (the host, a library, a tool it runs, the
workers that inherit them) wrote into the frames being scored, or into a worker's link.
``keep_standard_descriptors`` opens /dev/null on any that is closed before a Scorer opens anything.
"""
from __future__ import annotations

import os
import threading

from vqa.codes import ErrorCode
from vqa.errors import VQAError


class ForkedError(VQAError, RuntimeError):
    """A Scorer (or what it holds) used in a process forked from the one that made it."""

    code = ErrorCode.E_USAGE


class CallbackError(VQAError, RuntimeError):
    """A blocking call on the engine's own thread, from a future's done-callback."""

    code = ErrorCode.E_USAGE


class Owner:
    """The process that made a resource: ``here`` is False in a forked child."""

    __slots__ = ("pid", "what")

    def __init__(self, what: str):
        self.pid, self.what = os.getpid(), what

    @property
    def here(self) -> bool:
        return os.getpid() == self.pid

    def check(self) -> None:
        if not self.here:
            raise ForkedError(
                f"this {self.what} was made in process {self.pid}; process {os.getpid()} is a fork of it and "
                f"cannot use it (its decode workers, shared memory and threads stay with the parent). Make a "
                f"new {self.what} in the child (vqa.score() does), or fork before making one")


_engine_thread = threading.local()


def mark_engine_thread() -> None:
    """Called first thing by an engine's own thread (the one that finishes futures)."""
    _engine_thread.active = True


def on_engine_thread() -> bool:
    return getattr(_engine_thread, "active", False)


def refuse_on_engine_thread(call: str) -> None:
    """CallbackError if ``call`` is made on an engine's thread, where it would wait for itself."""
    if on_engine_thread():
        raise CallbackError(
            f"{call} was called from a future's done-callback, which runs on the Scorer's engine thread: it "
            "would wait for that thread itself. In a callback, use scorer.submit(path) and add a callback "
            "to its future, or hand the work to another thread (an executor)")


def keep_standard_descriptors() -> None:
    """Open /dev/null on each of descriptors 0, 1 and 2 that is closed, inheritable as they are,
    so that no file, pipe or shared memory of vqa's, nor of its workers, is ever opened there."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            got = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
        except OSError:
            return
        if got != fd:  # another thread took it meanwhile: it is open now, which is all we want
            os.close(got)
            continue
        os.set_inheritable(fd, True)


_exiting = False  # vqa's exit hooks have run


def mark_exiting() -> None:
    """Called by vqa's exit hook (vqa.scorer.local), before it closes the default Scorers."""
    global _exiting
    _exiting = True


def refuse_when_exiting() -> None:
    """A Scorer made by a daemon thread once vqa's exit hooks have run is closed by nobody, and
    the process ended while its model compiled or ran: C++ aborted it (exit status 134).
    Refused instead, as the standard library's executors refuse new work then. The main thread
    (another program's exit hook, run after vqa's) may still make one."""
    if _exiting and threading.current_thread() is not threading.main_thread():
        raise RuntimeError("cannot make a vqa Scorer (or call vqa.score) in a daemon thread once the interpreter "
                           "is exiting: score in the main thread or a non-daemon thread, or end the daemon "
                           "thread's work before the program ends")
