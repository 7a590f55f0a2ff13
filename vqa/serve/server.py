"""Run the service on uvicorn until SIGTERM or Ctrl-C.

The model loads and the workers start before the port opens, so a caller that can connect
finds the engine ready; a ``ready`` line then says where and with what. On SIGTERM (or SIGINT)
the intake stops at once, uploads still arriving are answered 503, uvicorn lets the requests
in progress finish (within the drain timeout), then the lifespan's end waits for the job's
videos in flight and stores them; jobs.db is checkpointed (one file, a complete backup), and
the process exits with 128 + the signal, as ``vqa score`` does. The next start carries on with
every job not done.

Files: the process's umask is 077, so everything it creates (the stores and their -wal and
-shm files, uploads) is private to its user whatever the data folder's mode.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from contextlib import contextmanager

from .log import ServeLog
from .runner import Service
from .settings import ServeSettings


def serve(settings: ServeSettings) -> None:
    """Serve until SIGTERM or SIGINT; then exit with 128 + the signal, after the drain."""
    import uvicorn

    from .app import create_app
    from .protocol import ACCEPT_BACKLOG, connection_cap, guarded_protocol

    os.umask(0o077)  # before any file: the stores, their -wal and -shm, uploads
    log = ServeLog(settings.log_format)
    service = Service(settings, log)
    try:
        cap = connection_cap(settings.max_connections)
        protocol = guarded_protocol(cap=cap, header_timeout_s=settings.header_timeout_s)
        config = uvicorn.Config(create_app(service), host=settings.host, port=settings.port, log_config=None,
                                log_level="warning", access_log=False, lifespan="on", server_header=False,
                                http=protocol, backlog=ACCEPT_BACKLOG,
                                timeout_keep_alive=max(1, int(settings.header_timeout_s)),
                                timeout_graceful_shutdown=max(1, int(settings.drain_timeout_s)))
        _log_through(log)
        server = _server(config, service)
        server.cap = cap
        server.run()
    finally:
        service.close()
    log.event("stopped", signal=server.stopped_by and signal.Signals(server.stopped_by).name)
    if server.stopped_by is not None:
        sys.exit(128 + server.stopped_by)


def _log_through(log: ServeLog) -> None:
    """uvicorn's own warnings and errors in the service's log format, once."""
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [log.handler()]
        logger.setLevel(logging.WARNING)
        logger.propagate = False


def _server(config, service: Service):
    """uvicorn's Server, told of the signal first, so the job thread stops taking videos while
    uvicorn closes its connections. uvicorn 0.54 raises the signal again from inside its event
    loop once it is done, which crashed this process with SIGSEGV (exit 139, seen under gdb in
    ``signal.raise_signal``); this one only remembers it, and ``serve`` exits with 128 + the
    signal once everything is closed, as ``vqa score`` does."""
    import uvicorn

    class Server(uvicorn.Server):
        stopped_by: int | None = None
        cap = 0

        def handle_exit(self, sig, frame):
            if self.stopped_by is None:
                service.log.event("stopping", signal=signal.Signals(sig).name,
                                  drain_timeout_s=service.settings.drain_timeout_s)
            service.stop()
            self.stopped_by = sig
            super().handle_exit(sig, frame)

        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.started:
                service.log.event("ready", url=_url(self), **service.describe(), max_connections=self.cap)

        @contextmanager
        def capture_signals(self):
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server(config)


def _url(server) -> str:
    for listener in getattr(server, "servers", ()):
        for sock in listener.sockets:
            host, port = sock.getsockname()[:2]
            return f"http://{f'[{host}]' if ':' in host else host}:{port}"
    return f"http://{server.config.host}:{server.config.port}"
