"""``vqa serve``: the batch service a pipeline calls over HTTP, on the same engine and job store.

    settings = ServeSettings(roots=["/srv/uploads"])     # what ``vqa serve`` parses its options into
    serve(settings)                                       # blocks until SIGTERM or Ctrl-C

The web framework (FastAPI on uvicorn, the ``serve`` extra) is imported only by
``vqa.serve.app``, ``schema``, ``protocol`` and ``server``; the rest is plain Python:

- ``settings``  the options (each with its ``vqa serve`` flag), the bind and data-folder checks;
- ``guard``     in front of every route: framing, Host and Origin, the token, HEAD, no-store, access log;
- ``protocol``  the HTTP connection's header timeout and connection cap;
- ``schema``    the OpenAPI document and the offline docs pages;
- ``log``       the log on stderr, text or JSON;
- ``pools``     the bounded pool for reports;
- ``callbacks`` a job's signed callback when it is done;
- ``paths``     which paths a request may name (under ``--root``, as the CLI resolves them);
- ``uploads``   request bodies into a private folder, under a size limit;
- ``jobs``      jobs, their inputs and their records in SQLite;
- ``engine``    the one seam to the scoring engine;
- ``runner``    the job queue: one thread drives queued jobs through the engine;
- ``metrics``   counters and the Prometheus text.
"""
from __future__ import annotations

from .settings import ServeSettings

__all__ = ["ServeSettings"]
