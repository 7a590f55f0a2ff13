"""The HTTP/1.1 connection (uvicorn's h11 protocol) with two limits an idle socket must not get
past: a header timeout and a connection cap.

- A connection that has no request in progress (it has not finished sending a request's
  headers, or is idle between requests) for ``header_timeout_s`` is closed. uvicorn closes
  idle keep-alive connections, but not one that sends nothing at all, or half a header.
- Past ``cap`` open connections, a new one closes the connection that has waited longest with
  no request in progress; when every one is busy, the new one is closed instead. Connections
  never reach the open-file limit, so the accept loop never meets EMFILE (which it logged
  again and again), and a probe always gets in however many sockets sit idle.

uvicorn's own ``limit_concurrency`` is not used: past it every request, /healthz included,
gets 503 while the idle sockets stay.
"""
from __future__ import annotations

import resource

from uvicorn.protocols.http.h11_impl import H11Protocol

# asyncio accepts up to the listen backlog in one go, before any connection_made (and so any
# eviction) runs, and an evicted socket's descriptor is freed an iteration later: the reserve
# covers two such batches besides the service's own files (stores, uploads, worker pipes).
ACCEPT_BACKLOG = 64
RESERVED_FDS = 256 + 2 * ACCEPT_BACKLOG


def connection_cap(asked: int) -> int:
    """``asked``, or (0) the open-file limit less a reserve; the soft limit is raised to the
    hard one first, as servers do, since each connection is a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    room = max(16, (soft if soft != resource.RLIM_INFINITY else 1 << 20) - RESERVED_FDS)
    return min(asked, room) if asked else room


def guarded_protocol(*, cap: int, header_timeout_s: float, on_evict=None) -> type:
    """The h11 protocol class with these limits (uvicorn's ``http=`` takes a class)."""

    class Guarded(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._waiting_since = self.loop.time()
            self._timer = self.loop.call_later(header_timeout_s, self._check_idle)
            if len(self.connections) > cap:
                self._make_room()

        def _busy(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _check_idle(self) -> None:
            if self.transport.is_closing():
                return
            if self._busy():
                self._timer = self.loop.call_later(header_timeout_s, self._check_idle)
                return
            left = self._waiting_since + header_timeout_s - self.loop.time()
            if left > 0:
                self._timer = self.loop.call_later(left, self._check_idle)
            else:
                self.transport.close()

        def on_response_complete(self) -> None:
            self._waiting_since = self.loop.time()  # waiting for the next request's headers from now
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            self._timer.cancel()
            super().connection_lost(exc)

        def _make_room(self) -> None:
            idle = [c for c in self.connections if c is not self and isinstance(c, Guarded) and not c._busy()
                    and not c.transport.is_closing()]
            if not idle:
                self.transport.close()  # every other connection is serving a request: this one waits outside
                return
            oldest = min(idle, key=lambda c: c._waiting_since)
            oldest.transport.close()
            oldest.connections.discard(oldest)  # counted out now, not when the loop gets to it
            if on_evict is not None:
                on_evict()

    return Guarded
