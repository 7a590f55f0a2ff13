"""Run the service on uvicorn until SIGTERM or Ctrl-C.

The model loads and the workers start before the port opens, so a caller that can connect
finds the engine ready. On SIGTERM (or SIGINT) the intake stops at once, uvicorn lets the
requests in progress finish (single uploads, within the drain timeout), then the lifespan's
end waits for the job's videos in flight and stores them; the process exits with 128 + the
signal, as ``vqa score`` does, and the next start carries on with every job not done.
"""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

from .runner import Service
from .settings import ServeSettings


def serve(settings: ServeSettings) -> None:
    """Serve until SIGTERM or SIGINT; then exit with 128 + the signal, after the drain."""
    import uvicorn

    from .app import create_app

    service = Service(settings)
    try:
        config = uvicorn.Config(create_app(service), host=settings.host, port=settings.port, log_level="warning",
                                access_log=False, lifespan="on", server_header=False,
                                timeout_graceful_shutdown=max(1, int(settings.drain_timeout_s)))
        server = _server(config, service)
        server.run()
    finally:
        service.close()
    if server.stopped_by is not None:
        sys.exit(128 + server.stopped_by)


def _server(config, service):
    """uvicorn's Server, told of the signal first, so the job thread stops taking videos while
    uvicorn closes its connections. uvicorn 0.54 raises the signal again from inside its event
    loop once it is done, which crashed this process with SIGSEGV (exit 139, seen under gdb in
    ``signal.raise_signal``); this one only remembers it, and ``serve`` exits with 128 + the
    signal once everything is closed, as ``vqa score`` does."""
    import uvicorn

    class Server(uvicorn.Server):
        stopped_by: int | None = None

        def handle_exit(self, sig, frame):
            service.stop()
            self.stopped_by = sig
            super().handle_exit(sig, frame)

        @contextmanager
        def capture_signals(self):
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server(config)
