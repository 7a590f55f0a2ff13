"""``vqa serve``: flags -> ServeSettings (with a ScoreOptions, the same flags as ``vqa score``)
-> vqa.serve. The web stack (the ``serve`` extra) is imported only when the command runs, so
``vqa --help`` and ``vqa score`` never need it."""
from __future__ import annotations

import os

import click

from vqa.cli.common import EXIT_USAGE, debug, fail, score_options
from vqa.codes import ErrorCode
from vqa.config import ScoreOptions
from vqa.errors import VQAError
from vqa.serve.settings import TOKEN_ENV, ServeSettings


@click.command("serve")
@click.option("--root", "roots", multiple=True, required=True, type=click.Path(file_okay=False, exists=True),
              help="Folder whose files jobs may name (repeatable); paths outside every root are refused (403).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Beyond localhost a token is required, unless --allow-no-token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8750, show_default=True)
@click.option("--data", "data_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the jobs, the results store and uploads in progress (made with mode 0700; "
                   "default ~/.local/state/vqa/serve). Kept across restarts: unfinished jobs carry on.")
@click.option("--token", default=None, help="Bearer token every route but /healthz requires "
                                            "(default: the VQA_SERVE_TOKEN environment variable).")
@click.option("--allow-no-token", is_flag=True, help="Listen beyond localhost without a token, on purpose.")
@click.option("--queue-jobs", type=click.IntRange(min=1), default=64, show_default=True,
              help="Jobs queued or running at once; past it, 429 with Retry-After.")
@click.option("--queue-uploads", type=click.IntRange(min=1), default=16, show_default=True,
              help="Single uploads (POST /v1/score) in progress at once; past it, 429 with Retry-After.")
@click.option("--max-body-kb", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Largest JSON request body; past it, 413.")
@click.option("--max-upload-mb", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Largest upload request (all its files); past it, 413.")
@click.option("--max-inputs", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Most videos in one job, once its folders are walked (the same file named twice counts once); "
                   "past it, 413.")
@click.option("--body-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Seconds a request body may take beyond --min-body-rate-kb; past it, 408 and its place is "
                   "given back.")
@click.option("--min-body-rate-kb", type=click.IntRange(min=0), default=16, show_default=True,
              help="Slowest a request body may arrive, in kB/s, after its first --body-timeout seconds "
                   "(0: the whole body within them).")
@click.option("--drain-timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="On SIGTERM: seconds the videos in flight may take to finish and be stored.")
@score_options
def serve(roots, host, port, data_dir, token, allow_no_token, queue_jobs, queue_uploads, max_body_kb, max_upload_mb,
          max_inputs, body_timeout, min_body_rate_kb, drain_timeout, **option_values):
    """Serve scoring over HTTP: jobs over files under --root, single uploads, records as they
    arrive, HTML reports, /healthz and /metrics. OpenAPI docs at /docs.

    Needs the serve extra: pip install '.[serve]' in vqa's checkout. One model and one pool of
    decode workers serve every request. SIGTERM finishes the videos in flight (within --drain-timeout),
    stores them and exits with status 143; the next start carries on with the queued jobs.
    """
    try:
        from vqa.serve.server import serve as run
    except ImportError as e:
        fail(ErrorCode.E_BACKEND, f"vqa serve needs the serve extra: pip install '.[serve]' in vqa's checkout ({e})",
             EXIT_USAGE)
    extra = {"data_dir": data_dir} if data_dir else {}
    settings = ServeSettings(roots=list(roots), host=host, port=port, token=token or os.environ.get(TOKEN_ENV),
                             allow_no_token=allow_no_token, queue_jobs=queue_jobs, queue_uploads=queue_uploads,
                             max_body_bytes=max_body_kb << 10, max_upload_bytes=max_upload_mb << 20,
                             max_inputs=max_inputs, body_timeout_s=body_timeout, min_body_rate=min_body_rate_kb << 10,
                             drain_timeout_s=drain_timeout, options=ScoreOptions(**option_values), **extra)
    try:
        run(settings)
    except VQAError as e:
        if debug():
            raise
        fail(e.code, e.message, EXIT_USAGE)
