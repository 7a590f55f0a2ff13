"""A small pool for expensive requests (HTML reports, whose thumbnails each start a decoder
process): at most ``size`` run at once, each on a thread of its own pool, never on the shared
one the synchronous routes use; past ``size``, ``Busy`` (429), so a burst cannot start a
process per request, and /healthz (answered on the event loop) never waits behind them."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from .errors import Busy

T = TypeVar("T")
RETRY_AFTER_S = 5


class Bounded:
    def __init__(self, size: int, name: str, what: str):
        self.size, self.what = size, what
        self._executor = ThreadPoolExecutor(size, thread_name_prefix=name)
        self._lock = threading.Lock()
        self.running = 0  # counted until the work itself ends, not when its client goes away

    async def run(self, work: Callable[[], T]) -> T:
        with self._lock:
            if self.running >= self.size:
                raise Busy(f"{self.running} {self.what} are being built, the most this server builds at once; "
                           "retry later", RETRY_AFTER_S)
            self.running += 1
        try:
            future: Future = self._executor.submit(work)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return await asyncio.wrap_future(future)

    def _done(self, _future: Future | None) -> None:
        with self._lock:
            self.running -= 1

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
