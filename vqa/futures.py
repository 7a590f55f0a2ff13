"""The future every engine returns: a ``concurrent.futures.Future`` that is finished the
moment it is cancelled, as the standard library's executors' futures are.

A plain ``Future`` that is cancelled while pending only tells ``wait`` and ``as_completed``
about it when its owner later calls ``set_running_or_notify_cancel()``; an executor does that
at once, but a video's engine may only get to it when the video's turn comes, or never (the
engine closed). So ``cancel()`` here does the notifying itself, and a later
``set_running_or_notify_cancel()`` on the cancelled future just answers False.
"""
from __future__ import annotations

from concurrent.futures import Future
# The state names are the base class's; they have not changed since Python 3.2.
from concurrent.futures._base import CANCELLED_AND_NOTIFIED

from vqa.lifecycle import refuse_on_engine_thread


class VideoFuture(Future):
    """A video's record to come; ``cancel()`` finishes it for every waiter at once, and waiting
    for it on the engine's own thread (in a done-callback) is a ``CallbackError``, not a hang."""

    def result(self, timeout=None):
        if not self.done():
            refuse_on_engine_thread("waiting for a video's record (score(), future.result())")
        return super().result(timeout)

    def exception(self, timeout=None):
        if not self.done():
            refuse_on_engine_thread("waiting for a video's record (future.exception())")
        return super().exception(timeout)

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self.set_running_or_notify_cancel()  # wait(), as_completed() hear of it now
        return True

    def set_running_or_notify_cancel(self) -> bool:
        with self._condition:  # an RLock: the base class takes it again
            if self._state == CANCELLED_AND_NOTIFIED:  # cancelled, and every waiter told
                return False
            return super().set_running_or_notify_cancel()
