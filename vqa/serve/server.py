"""Run the service on uvicorn until SIGTERM or Ctrl-C.

The model loads and the workers start before the port opens, so a caller that can connect
finds the engine ready. On SIGTERM (or SIGINT) the intake stops at once, uvicorn lets the
requests in progress finish (single uploads, within the drain timeout), then the lifespan's
end waits for the job's videos in flight and stores them; the process exits with 128 + the
signal, as ``vqa score`` does, and the next start carries on with every job not done.
"""
from __future__ import annotations

import signal

from .runner import Service
from .settings import ServeSettings


def serve(settings: ServeSettings) -> None:
    import uvicorn

    from .app import create_app

    service = Service(settings)
    try:
        config = uvicorn.Config(create_app(service), host=settings.host, port=settings.port, log_level="warning",
                                access_log=False, lifespan="on", server_header=False,
                                timeout_graceful_shutdown=max(1, int(settings.drain_timeout_s)))
        server = _server(config, service)
        # uvicorn raises the signal it stopped on again once it is done: end with 128 + signal.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _exit)
        server.run()
    finally:
        service.close()


def _server(config, service):
    """uvicorn's Server, told of the signal first, so the job thread stops taking videos while
    uvicorn closes its connections."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            service.stop()
            super().handle_exit(sig, frame)

    return Server(config)


def _exit(signum, _frame):
    raise SystemExit(128 + signum)
