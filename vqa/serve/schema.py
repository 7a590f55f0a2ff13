"""The service's OpenAPI document, made true: a response model for every route, the error
statuses and codes each route really answers (400 ``E_USAGE`` where FastAPI would advertise
its 422), the bearer scheme when the server has a token, and the docs pages (Swagger UI and
ReDoc) from assets shipped with the package (``fastapi-offline``), so they work offline.

The docs pages, their assets and ``/openapi.json`` are answered without the token: they are
the same for every server of this version and hold no data (no job, record, path or setting).
A browser cannot send a bearer header on a page load, so this is how the docs open at all with
a token set; every call made from them ("Try it out") still needs the token, given once
through the page's Authorize button and sent as a header, never in a URL.
"""
from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vqa.codes import ErrorCode

ASSETS = "/docs-assets"
DOC_PATHS = ("/docs", "/redoc", "/openapi.json")


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo ("globs") is refused, never silently ignored

    paths: list[str] = Field(..., min_length=1, description="Files and folders under the server's --root folders; "
                             "folders are walked recursively as `vqa score` walks them.")
    glob: list[str] = Field(default_factory=list, description="File-name patterns for folders (as --glob).")
    callback_url: str | None = Field(None, description=(
        "Called (POST of the job, signed: X-VQA-Signature: sha256=HMAC-SHA256 of the body) once the job is done; "
        "retried with backoff. Its host must be one the server's --callback-host allows."))


UPLOAD_BODY = {"parameters": [{"name": "name", "in": "query", "required": False, "schema": {"type": "string"},
                                "description": "A raw body's file name, for its record"}],
                "requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary"}}}},
    "application/octet-stream": {"schema": {"type": "string", "format": "binary", "minLength": 1}}}}}
JOB_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": JobRequest.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "array", "minItems": 1, "items": {"type": "string", "format": "binary"}}}}}}}}


class ErrorDetail(BaseModel):
    code: str = Field(description="A stable code (vqa.codes.ErrorCode)", examples=[ErrorCode.E_USAGE.value])
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")
    ok: bool
    model_loaded: bool
    workers: int
    workers_alive: int
    jobs_thread_alive: bool
    nvdec_workers: int | None = None
    error: str | None = None


class Job(BaseModel):
    id: str
    kind: Literal["paths", "upload"]
    state: Literal["queued", "running", "done"]
    total: int
    created: str = Field(description="ISO 8601, UTC", examples=["2026-12-05T09:30:00.123Z"])
    finished: str | None = Field(description="ISO 8601, UTC; null until done")
    done: int
    ok: int
    failed: int
    errors_by_code: dict[str, int]


class JobWithRecords(Job):
    records: list[dict[str, Any]] | None = Field(
        None, description="The records so far, in input order (the output contract of `vqa score`)")


class JobList(BaseModel):
    jobs: list[Job]


class Accepted(BaseModel):
    id: str
    state: Literal["queued"]
    total: int = Field(description="Videos in the job, once its folders were walked")


class Deleted(BaseModel):
    id: str
    deleted: Literal[True]


# What each status means, whichever route answers it, and its codes.
STATUSES: dict[int, tuple[str, tuple[ErrorCode, ...]]] = {
    400: ("The request is not one the route takes", (ErrorCode.E_USAGE,)),
    401: ("No bearer token, or the wrong one", (ErrorCode.E_AUTH,)),
    403: ("A path outside every --root, or (without a token) a Host or Origin not this server's",
          (ErrorCode.E_BAD_PATH, ErrorCode.E_ORIGIN)),
    404: ("No such job", (ErrorCode.E_NO_JOB,)),
    408: ("The request body did not arrive in time", (ErrorCode.E_SLOW_BODY,)),
    413: ("The body is over the limit, or the job over --max-inputs", (ErrorCode.E_TOO_LARGE,)),
    429: ("The queue or pool is full; retry after Retry-After seconds", (ErrorCode.E_BUSY,)),
    503: ("The server is stopping while the body arrives; retry after Retry-After seconds", (ErrorCode.E_BUSY,)),
    507: ("The server's data disk is full", (ErrorCode.E_NO_SPACE,)),
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that can answer these error statuses."""
    return {status: {"model": ErrorBody, "description": f"{STATUSES[status][0]}: "
                     + ", ".join(f"`{c.value}`" for c in STATUSES[status][1])} for status in statuses}


def tailor(app, *, token: bool, callback_pattern: str | None = None) -> None:
    """Make ``app.openapi()`` the document of this server: FastAPI's 422 (never answered)
    out, the guard's statuses (401 with a token, 403 E_ORIGIN without) and the bearer scheme in."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        guard = errors(401) if token else errors(403)
        error_schema = {"$ref": "#/components/schemas/ErrorBody"}
        for path, operations in doc.get("paths", {}).items():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                for status, entry in responses.items():  # errors are JSON, also on the HTML report's route
                    if status.isdigit() and int(status) >= 400 and "text/html" in entry.get("content", {}):
                        entry["content"] = {"application/json": entry["content"].pop("text/html")}
                if path == "/healthz" or path in DOC_PATHS:
                    continue
                for status, value in guard.items():
                    entry = responses.setdefault(str(status), {"description": value["description"], "content": {
                        "application/json": {"schema": error_schema}}})
                    if status == 403 and not token and ErrorCode.E_ORIGIN.value not in entry["description"]:
                        entry["description"] += " " + value["description"]
                if token:
                    operation["security"] = [{"bearer": []}]
        _callback_url(doc, callback_pattern)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        if token:
            doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer", "description":
                                                    "The server's --token (or VQA_SERVE_TOKEN)"}}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi


def _callback_url(doc: dict[str, Any], pattern: str | None) -> None:
    """A job's callback_url as this server takes it: the URLs of its allowed hosts, or (none
    allowed) no such field, so the document promises only what is answered 202."""
    body = doc.get("paths", {}).get("/v1/jobs", {}).get("post", {}).get("requestBody", {})
    schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    properties = schema.get("properties", {})
    if "callback_url" not in properties:
        return
    if pattern is None:
        del properties["callback_url"]
    else:
        properties["callback_url"] = {"anyOf": [{"type": "string", "pattern": pattern}, {"type": "null"}],
                                      "default": None, "description": properties["callback_url"].get("description")}


def add_docs(app) -> None:
    """/docs (Swagger UI) and /redoc (ReDoc) from the packaged assets, no CDN."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse, PlainTextResponse
    from fastapi.staticfiles import StaticFiles

    folder = asset_folder()
    if folder is None:
        message = "the docs pages need their assets: pip install '.[serve]' in vqa's checkout (fastapi-offline)"

        @app.get("/docs", include_in_schema=False)
        @app.get("/redoc", include_in_schema=False)
        def missing():
            return PlainTextResponse(message, status_code=404)
        return
    app.mount(ASSETS, StaticFiles(directory=folder), name="docs-assets")

    @app.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    def swagger():
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon.png")

    @app.get("/redoc", include_in_schema=False, response_class=HTMLResponse)
    def redoc():
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - API",
                              redoc_js_url=f"{ASSETS}/redoc.standalone.js", redoc_favicon_url=f"{ASSETS}/favicon.png",
                              with_google_fonts=False)


def asset_folder() -> str | None:
    """The Swagger UI and ReDoc files fastapi-offline ships (Swagger UI: Apache-2.0; ReDoc: MIT)."""
    try:
        import fastapi_offline
    except ImportError:
        return None
    folder = os.path.join(os.path.dirname(fastapi_offline.__file__), "static")
    return folder if os.path.isfile(os.path.join(folder, "swagger-ui-bundle.js")) else None
