"""What every engine is: ``submit(path, split) -> Future`` from any thread, ``close()`` once;
and the registry that closes engines still open when the interpreter exits."""
from __future__ import annotations

import atexit
import multiprocessing.util  # noqa: F401 - registers its exit hook now: see _close_live below
import queue
import weakref
from concurrent.futures import Future


class Engine:
    """What a Scorer drives: ``submit`` from any thread, ``close`` once. ``split``: the video
    may be spread over every worker (for one video scored alone); whether it is never depends
    on what else is queued, so a record never depends on the traffic. ``broken``: why the
    engine stopped working, if it did (the Scorer then starts a new one)."""

    broken: BaseException | None = None

    def submit(self, path: str, split: bool = False, shown: str | None = None) -> Future:
        """``shown``: the path the record names, where ``path`` (the one opened) differs."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


# Engines still open when the interpreter exits are closed first, so that their threads do
# not run on while modules are torn down. atexit runs the last hook registered first, and
# multiprocessing.util registers its own when first imported: imported above, it is older.
# Only the process that made an engine closes it: a forked child exiting leaves the parent's alone.
_live: weakref.WeakSet[Engine] = weakref.WeakSet()


def register(engine: Engine) -> None:
    _live.add(engine)


@atexit.register
def _close_live() -> None:
    for engine in list(_live):
        lifecycle = getattr(engine, "_lifecycle", None)
        if lifecycle is not None and not lifecycle.here:
            continue
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def cancel_queued(requests: queue.SimpleQueue) -> None:
    """Cancel the futures of the requests still in ``requests`` ((path, future, shown); None: a stop)."""
    while True:
        try:
            item = requests.get_nowait()
        except queue.Empty:
            return
        if item is not None:
            item[1].cancel()
