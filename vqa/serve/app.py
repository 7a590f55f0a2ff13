"""The HTTP face of the service (FastAPI): routes, the bearer token, limits and error bodies.

Every error is JSON ``{"error": {"code": "E_...", "message": ...}}`` with a stable code:
``E_USAGE`` 400 (also a bad query parameter), ``E_AUTH`` 401, ``E_BAD_PATH`` and ``E_ORIGIN``
403, ``E_NO_JOB`` and ``E_NO_ROUTE`` 404, ``E_METHOD`` 405, ``E_SLOW_BODY`` 408, ``E_TOO_LARGE``
413, ``E_BUSY`` 429 (with ``Retry-After``; 503 for a body still arriving at a stop),
``E_INTERNAL`` 500, ``E_NO_SPACE`` 507. Every JSON answer is ASCII (``AsciiJSON``).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import time
from collections.abc import Mapping
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from vqa.codes import ErrorCode
from vqa.errors import VQAError

from . import metrics as metrics_text
from .guard import Guard, HostRule
from .schema import (JOB_BODY, UPLOAD_BODY, Accepted, Deleted, Health, JobList, JobRequest, JobWithRecords,
                     add_docs, errors, tailor)
from .jobs import DONE
from .errors import Busy, no_space_error
from .runner import ONE_PREFIX, JOB_PREFIX, Service
from .uploads import BadUpload, SlowBody, Stopped, TooLarge, paced, receive

DRAIN_REFUSED_BYTES = 8 << 20  # a refused upload this small is read to its end, so the client sees the answer
POLL_S = 0.05  # how often a follow reader looks for new records
SQLITE_MAX = 2 ** 63 - 1  # the largest index SQLite compares with; past it, an OverflowError mid-stream
VQA_STATUS: dict[str, int] = {ErrorCode.E_BAD_PATH: 403, ErrorCode.E_TOO_LARGE: 413}  # a VQAError's status; else 400


class Problem(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.headers = status, code, headers or {}


class AsciiJSON(JSONResponse):
    """JSON in ASCII. A record's path keeps a name's undecodable bytes as lone surrogates
    (os.fsdecode), which UTF-8 cannot encode (Starlette's own JSON gave a 500), and may hold
    U+2028, which line readers split on: escaped, both come back unchanged (the output contract)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return AsciiJSON({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def create_app(service: Service) -> Guard:
    """The ASGI app: the routes (FastAPI) behind the guard (vqa.serve.guard)."""
    settings = service.settings

    async def lifespan(_app):
        yield
        await asyncio.to_thread(service.close)  # SIGTERM: the videos in flight finish and are stored

    app = FastAPI(title="vqa serve", version=_version(), lifespan=lifespan, default_response_class=AsciiJSON,
                  docs_url=None, redoc_url=None,
                  description="No-reference video quality assessment as a batch service: jobs over files under "
                              "the server's --root folders or uploaded, records in the output contract of "
                              "`vqa score`. Every route but /healthz and the docs needs `Authorization: Bearer "
                              "TOKEN` when the server has a token. Every error is `{\"error\": {\"code\", "
                              "\"message\"}}` with a stable code.")
    tailor(app, token=settings.token is not None, callback_pattern=service.callback_rule.url_pattern())
    add_docs(app)

    @app.exception_handler(Problem)
    async def problem(_request, exc: Problem):
        return _error(exc.status, exc.code, str(exc), exc.headers)

    @app.exception_handler(Busy)
    async def busy(_request, exc: Busy):
        return _error(429, ErrorCode.E_BUSY, str(exc), {"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(VQAError)
    async def refused(_request, exc: VQAError):
        return _error(VQA_STATUS.get(exc.code, 400), exc.code, exc.message)

    @app.exception_handler(SlowBody)
    async def slow(_request, exc: SlowBody):
        return _error(408, ErrorCode.E_SLOW_BODY, str(exc), {"Connection": "close"})

    @app.exception_handler(Stopped)
    async def stopped(_request, exc: Stopped):
        return _error(503, ErrorCode.E_BUSY, str(exc), {"Retry-After": "30", "Connection": "close"})

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, exc: RequestValidationError):
        return _error(400, ErrorCode.E_USAGE, _first_problem(exc.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):  # no such route (404), method (405)
        code = {404: ErrorCode.E_NO_ROUTE, 405: ErrorCode.E_METHOD}.get(exc.status_code, ErrorCode.E_USAGE)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names only the first route's methods; a path may have several
            headers["Allow"] = _allowed(app.routes, request.url.path)
        return _error(exc.status_code, code, str(exc.detail), headers)

    async def no_space(_request, exc: Exception):
        """A full disk is the operator's to fix, not a bug: 507, and the connection is kept
        (handled here, not as an internal error, which uvicorn answers by closing it)."""
        if not no_space_error(exc):
            raise exc  # an internal error after all: 500 below, its traceback in the log
        return _error(507, ErrorCode.E_NO_SPACE, "the server's data disk is full: nothing was kept of this "
                      "request; retry once the operator has made room")

    app.add_exception_handler(OSError, no_space)
    app.add_exception_handler(sqlite3.Error, no_space)

    @app.exception_handler(Exception)
    async def internal(_request, exc: Exception):  # the traceback still goes to the log
        if no_space_error(exc):
            return _error(507, ErrorCode.E_NO_SPACE, "the server's data disk is full: nothing was kept of this "
                          "request; retry once the operator has made room")
        return _error(500, ErrorCode.E_INTERNAL, "an internal error: please report it (the server's log says more)")

    @app.get("/healthz", summary="Model loaded, decode workers alive (no token needed)", response_model=Health,
             responses={503: {"model": Health, "description": "Not ready: `ok` is false and says why"}})
    async def healthz():  # on the event loop itself: it never waits for a thread of any pool
        state = service.health()
        return AsciiJSON(state, status_code=200 if state["ok"] else 503)

    @app.get("/metrics", summary="Prometheus text: videos, errors by code, queue depth, time per video",
             response_class=PlainTextResponse)
    async def metrics():
        return Response(service.metrics.text(service.gauges()), media_type=metrics_text.CONTENT_TYPE)

    @app.post("/v1/jobs", status_code=202, openapi_extra=JOB_BODY, response_model=Accepted,
              responses={202: {"headers": {"Location": {"description": "The job's URL", "schema": {
                  "type": "string"}}}}, **errors(400, 403, 408, 413, 429, 503, 507)},
              summary="Queue a job: JSON {\"paths\": [...]} under --root, or uploaded files (multipart)")
    async def create_job(request: Request):
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            await _admit(request, _body(request), service.admit_job)
            try:
                folder, uploads = await _received(request, JOB_PREFIX)
            except BaseException:
                service.release_job()
                raise
            try:
                return _accepted(service.add_upload_job(folder, uploads))  # its place is given back when it ends
            except BaseException:
                service.release_job()
                shutil.rmtree(folder, ignore_errors=True)
                raise
        body = await _read_body(request, _body(request), settings.max_body_bytes)
        try:
            job = JobRequest.model_validate_json(body)
        except ValidationError as e:
            raise Problem(400, ErrorCode.E_USAGE, _body_problem(e)) from None
        return _accepted(await run_in_threadpool(service.submit_paths, job.paths, job.glob, job.callback_url))

    @app.get("/v1/jobs", summary="Every job the server holds, with its counts", response_model=JobList)
    def list_jobs():
        return AsciiJSON({"jobs": service.jobs()})

    @app.get("/v1/jobs/{job_id}", summary="A job's state, counts and (unless records=false) records so far",
             response_model=JobWithRecords, responses=errors(400, 404))
    def get_job(job_id: str, records: bool = True):
        job = _job(job_id)
        if records:
            job["records"] = list(service.db.iter_records(job_id))
        return AsciiJSON(job)

    @app.get("/v1/jobs/{job_id}/records", summary="A job's records, streamed as they arrive until it is done",
             response_class=StreamingResponse, responses={200: {"description": "One record a line (jsonl), or "
                                                           "one JSON array (json)", "content": {
                 "application/x-ndjson": {"schema": {"type": "string"}},
                 "application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}},
                 **errors(400, 404)})
    async def job_records(job_id: str, format: Literal["jsonl", "json"] = "jsonl",
                          follow: bool = Query(True, description="Wait for the job's later records"),
                          after: int = Query(-1, ge=-1, le=SQLITE_MAX,
                                             description="Only records after this index (0-based)")):
        await run_in_threadpool(_job, job_id)
        lines = _follow(service, job_id, after, follow)
        if format == "json":
            lines = _array(lines)
        media = "application/x-ndjson" if format == "jsonl" else "application/json"
        return StreamingResponse(lines, media_type=media)

    @app.get("/v1/jobs/{job_id}/report", response_class=HTMLResponse, responses=errors(400, 404, 429),
             summary="The job's HTML report: the page `vqa report` writes, with its content-security policy")
    async def job_report(job_id: str, thumbnails: int = Query(0, ge=0, le=50, description=(
            "Thumbnails for the N lowest-scoring videos (jobs by path only: uploads are deleted once scored)"))):
        from vqa.report_html import build_report, content_security_policy

        def page() -> str:
            job = _job(job_id)
            records: list[Mapping[str, Any]] = list(service.db.iter_records(job_id, confined=True))
            return build_report(records, thumbnails=thumbnails if job["kind"] == "paths" else 0,
                                title=f"vqa job {job_id}",
                                source=f"{job['state']}: {job['done']} of {job['total']} videos")
        headers = {"Content-Security-Policy": content_security_policy(), "X-Content-Type-Options": "nosniff"}
        return HTMLResponse(await service.reports.run(page), headers=headers)

    @app.delete("/v1/jobs/{job_id}", summary="Forget a job and its records (a running one stops first)",
                response_model=Deleted, responses=errors(404))
    def delete_job(job_id: str):
        if not service.delete(job_id):
            raise Problem(404, ErrorCode.E_NO_JOB, f"no job {job_id}")
        return AsciiJSON({"id": job_id, "deleted": True})

    @app.post("/v1/score", openapi_extra=UPLOAD_BODY, response_model=dict[str, Any],
              responses={200: {"description": "The video's record (the output contract of `vqa score`)"},
                         **errors(400, 408, 413, 429, 503, 507)},
              summary="Score one uploaded video and return its record (multipart `file`, or a raw body with ?name=)")
    async def score_upload(request: Request):
        started = time.perf_counter()
        await _admit(request, _body(request), service.admit_upload)
        try:
            folder, uploads = await _received(request, ONE_PREFIX)
            try:
                if len(uploads) != 1:
                    raise Problem(400, ErrorCode.E_USAGE, f"{len(uploads)} files in one request: POST /v1/score "
                                                          "takes one, POST /v1/jobs takes several")
                received = time.perf_counter()
                record = await asyncio.wrap_future(service.score_upload(uploads[0].path, uploads[0].name))
                scored = time.perf_counter()
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            service.release_upload()
        timing = (f"upload;dur={(received - started) * 1e3:.2f}, score;dur={(scored - received) * 1e3:.2f}, "
                  f"total;dur={(time.perf_counter() - started) * 1e3:.2f}")
        return AsciiJSON(record, headers={"Server-Timing": timing})

    def _body(request: Request):
        """The request's body as it arrives, cut off (SlowBody) when it stops or drags."""
        return paced(request.stream(), grace_s=settings.body_timeout_s, min_rate=settings.min_body_rate,
                     stopping=lambda: service.stopping)

    async def _received(request: Request, prefix: str):
        """(folder, uploads): the body's files in a new private folder, deleted again if that fails."""
        folder = service.new_upload_folder(prefix)
        body = _body(request)
        try:
            return folder, await _receive(request, body, folder, settings.max_upload_bytes)
        except BaseException as e:
            shutil.rmtree(folder, ignore_errors=True)
            if isinstance(e, Exception) and no_space_error(e):
                await _discard(request, body)  # read to its end when small, so the client hears 507
            raise

    def _job(job_id: str) -> dict:
        job = service.job(job_id)
        if job is None:
            raise Problem(404, ErrorCode.E_NO_JOB, f"no job {job_id}")
        return job

    return Guard(app, token=settings.token, hosts=HostRule(settings.host, settings.allow_hosts),
                 metrics=service.metrics, log=service.log, error=_error)


def _accepted(job: dict[str, Any]) -> JSONResponse:
    """202 with the new job, and where to find it (``Location``)."""
    return AsciiJSON(job, status_code=202, headers={"Location": f"/v1/jobs/{job['id']}"})


def _body_problem(e: ValidationError) -> str:
    """What is wrong with a job's JSON body, in one line; every unknown field named."""
    errors = e.errors(include_url=False)
    unknown = [".".join(map(str, err["loc"])) for err in errors if err["type"] == "extra_forbidden"]
    if unknown:
        return (f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the body takes "
                f"{', '.join(JobRequest.model_fields)}")
    return "the body must be JSON like {\"paths\": [\"/srv/a.mp4\"]}: " + errors[0]["msg"]


async def _admit(request: Request, body, admit) -> None:
    """``admit()`` a request that sends a body; refused (Busy), its body is read to the end
    first when small, so the client hears 429 instead of a connection cut while it sends."""
    try:
        admit()
    except Busy:
        await _discard(request, body)
        raise


async def _receive(request: Request, body, folder: str, limit: int):
    _check_length(request, limit)
    try:
        return await receive(body, request.headers.get("content-type", ""), folder, limit=limit,
                             name=request.query_params.get("name"))
    except TooLarge as e:
        raise Problem(413, ErrorCode.E_TOO_LARGE, str(e)) from None
    except BadUpload as e:
        raise Problem(400, ErrorCode.E_USAGE, str(e)) from None


def _check_length(request: Request, limit: int) -> None:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise Problem(413, ErrorCode.E_TOO_LARGE,
                      f"the request body ({length} bytes) is over the limit of {limit} bytes")


async def _read_body(request: Request, chunks, limit: int) -> bytes:
    _check_length(request, limit)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise Problem(413, ErrorCode.E_TOO_LARGE, f"the request body is over the limit of {limit} bytes")
    return bytes(body)


async def _discard(request: Request, chunks) -> None:
    """Read a small refused body to its end, so the client is not cut off while sending it
    (a slow one is cut off anyway: its answer stays the refusal)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) <= DRAIN_REFUSED_BYTES:
        try:
            async for _chunk in chunks:
                pass
        except (SlowBody, Stopped):
            pass


def _allowed(routes, path: str) -> str:
    """Every method the routes of ``path`` take, for a 405's ``Allow``."""
    return ", ".join(sorted({method for route in routes if isinstance(route, APIRoute) and route.path_regex.match(path)
                             for method in route.methods or ()}))


def _first_problem(errors) -> str:
    """A request validation error in one line: the parameter and what is wrong with it."""
    first = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}" + (f" ({len(errors) - 1} more)" if len(errors) > 1 else "")


async def _follow(service: Service, job_id: str, after: int, follow: bool):
    """Each record after ``after`` as one JSON line, waiting for more until the job is done.
    Records come from the database, a page at a time: a slow reader holds up nobody."""
    while True:
        seen = service.progress
        job = await run_in_threadpool(service.job, job_id)
        if job is None:
            return  # deleted
        finished = job["state"] == DONE or not follow or service.stopping
        while rows := await run_in_threadpool(service.db.records, job_id, after):
            after = rows[-1][0]
            yield "".join(text + "\n" for _seq, text in rows)
        if finished:
            return
        while service.progress == seen and not service.stopping:
            await asyncio.sleep(POLL_S)


async def _array(lines):
    yield "["
    first = True
    async for chunk in lines:
        for line in chunk.splitlines():
            yield ("" if first else ",\n") + line
            first = False
    yield "]\n"


def _version() -> str:
    import vqa
    return vqa.__version__
