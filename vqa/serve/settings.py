"""The service's options, and the checks made before anything starts: where it may listen
without a token, and where its own files live (never where a request could name them)."""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields
from typing import Any

from vqa.config import ENGINES, ScoreOptions
from vqa.errors import UsageError
from vqa.files import inside

TOKEN_ENV = "VQA_SERVE_TOKEN"  # the bearer token, when --token is not given
DEFAULT_PORT = 8750
LOG_FORMATS = ("text", "json")


def default_data_dir() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "vqa", "serve")


def _flag(default: Any = None, flag: str | None = None, help: str = "", *, unit: int = 1, minimum: float | None = None,
          maximum: float | None = None, kind: str = "int", choices: tuple[str, ...] | None = None,
          factory=None) -> Any:
    """A setting and its ``vqa serve`` flag: the CLI makes every flag from this metadata, so a
    setting's name, default, bounds and help live here once. ``unit``: the flag counts in
    units of this many (``--max-body-kb`` sets bytes); ``kind``: int, float, str, bool, choice,
    or many (repeatable)."""
    metadata = {"flag": flag, "help": help, "unit": unit, "minimum": minimum, "maximum": maximum, "kind": kind,
                "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ServeSettings:
    roots: list[str] = _flag(flag="--root", kind="many", factory=list, help=(
        "Folder whose files jobs may name (repeatable); paths outside every root are refused (403)."))
    host: str = _flag("127.0.0.1", "--host", kind="str", help=(
        "Address to listen on. Beyond localhost a token is required, unless --allow-no-token."))
    port: int = _flag(DEFAULT_PORT, "--port", minimum=0, maximum=65535)
    data_dir: str = _flag(flag="--data", kind="str", factory=default_data_dir, help=(
        "Folder for the jobs, the results store and uploads in progress (made with mode 0700, its files 0600; "
        "default ~/.local/state/vqa/serve). Kept across restarts: unfinished jobs carry on."))
    token: str | None = _flag(None, "--token", kind="str", help=(
        f"Bearer token every route but /healthz requires (default: the {TOKEN_ENV} environment variable)."))
    allow_no_token: bool = _flag(False, "--allow-no-token", kind="bool", help=(
        "Listen beyond localhost without a token, on purpose."))
    allow_hosts: tuple[str, ...] = _flag((), "--allow-host", kind="many", help=(
        "Without a token, the server answers only requests whose Host and Origin are loopback names, or the "
        "address it listens on: add a name it is reached by (repeatable; '*': any, e.g. behind a proxy that "
        "checks them)."))
    queue_jobs: int = _flag(64, "--queue-jobs", minimum=1, help=(
        "Jobs queued or running at once; past it, 429 with Retry-After."))
    queue_uploads: int = _flag(16, "--queue-uploads", minimum=1, help=(
        "Single uploads (POST /v1/score) in progress at once; past it, 429 with Retry-After."))
    report_workers: int = _flag(2, "--report-workers", minimum=1, help=(
        "HTML reports built at once (each decodes its thumbnails in its own process); past it, 429."))
    max_body_bytes: int = _flag(1 << 20, "--max-body-kb", unit=1 << 10, minimum=1, help=(
        "Largest JSON request body; past it, 413."))
    max_upload_bytes: int = _flag(2 << 30, "--max-upload-mb", unit=1 << 20, minimum=1, help=(
        "Largest upload request (all its files); past it, 413."))
    max_inputs: int = _flag(100_000, "--max-inputs", minimum=1, help=(
        "Most videos in one job, once its folders are walked (the same file named twice counts once); past it, 413."))
    # A body must keep arriving: by body_timeout_s + n / min_body_rate seconds it must be past
    # byte n, else 408 and its place is given back (an idle client would hold it for good).
    body_timeout_s: float = _flag(60.0, "--body-timeout", kind="float", help=(
        "Seconds a request body may take beyond --min-body-rate-kb; past it, 408 and its place is given back."))
    min_body_rate: int = _flag(16 << 10, "--min-body-rate-kb", unit=1 << 10, minimum=0, help=(
        "Slowest a request body may arrive, in kB/s, after its first --body-timeout seconds "
        "(0: the whole body within them)."))
    header_timeout_s: float = _flag(10.0, "--header-timeout", kind="float", help=(
        "Seconds a connection may take to send a request's headers, or stay idle between requests; "
        "past it, it is closed."))
    max_connections: int = _flag(0, "--max-connections", minimum=0, help=(
        "Open connections at most; a new one past it closes the longest-idle one (one with no request in "
        "progress). 0: the open-file limit less a reserve."))
    drain_timeout_s: float = _flag(30.0, "--drain-timeout", kind="float", minimum=0, help=(
        "On SIGTERM: seconds the videos in flight may take to finish and be stored."))
    callback_hosts: tuple[str, ...] = _flag((), "--callback-host", kind="many", help=(
        "A host (or host:port) a job's callback_url may name (repeatable); none: no callbacks. A loopback or "
        "link-local address is called only when named itself, never through a name that resolves to one."))
    callback_secret: str | None = _flag(None, "--callback-secret", kind="str", help=(
        "The key callbacks are signed with (HMAC-SHA256, X-VQA-Signature) (default: the "
        "VQA_SERVE_CALLBACK_SECRET environment variable)."))
    engine: str = _flag("local", "--engine", kind="choice", choices=ENGINES, help=(
        "local: this machine. ray: the server is a Ray driver, videos go to actors on the cluster's nodes "
        "(RAY_ADDRESS=auto joins the one `ray start` made; none: a local one is started); the job store, "
        "restart and exactly-once stay the server's. Needs: pip install '.[ray]' in vqa's checkout"))
    actors_per_node: int | None = _flag(None, "--actors-per-node", minimum=1, help=(
        "With --engine ray: actors on each node, sharing its CPUs (default 1)."))
    log_format: str = _flag("text", "--log-format", kind="choice", choices=LOG_FORMATS, help=(
        "The log on stderr: text lines, or one JSON object a line for a log shipper."))
    options: ScoreOptions = field(default_factory=ScoreOptions)  # what the server's one Scorer runs with

    def checked(self) -> ServeSettings:
        """Raise UsageError for settings that must not start: no root, a root that is not a
        folder, the data folder inside a root (a job could name the uploads or the stores) or
        a root inside it, or a public address without a token."""
        if not self.roots:
            raise UsageError("give at least one --root folder: jobs may only name files under one")
        for root in self.roots:
            if not os.path.isdir(root):
                raise UsageError(f"--root {root} is not a folder")
        data = os.path.realpath(self.data_dir)
        for root in map(os.path.realpath, self.roots):
            if inside(data, root) or inside(root, data):
                raise UsageError(f"--data {self.data_dir} and --root {root} overlap: a job could name the "
                                 "service's own files; keep them apart")
        if not self.token and not self.allow_no_token and not is_loopback(self.host):
            raise UsageError(f"--host {self.host} listens beyond this machine, and no token is set: give "
                             f"--token (or {TOKEN_ENV}), or --allow-no-token if every caller may use it")
        for name in ("queue_jobs", "queue_uploads", "max_body_bytes", "max_upload_bytes", "max_inputs"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name.replace('_', '-')} must be at least 1")
        if not self.body_timeout_s > 0 or self.min_body_rate < 0:
            raise UsageError("body-timeout must be over 0 seconds, and min-body-rate at least 0")
        if not self.header_timeout_s > 0 or self.report_workers < 1 or self.max_connections < 0:
            raise UsageError("header-timeout must be over 0 seconds, report-workers at least 1, "
                             "max-connections at least 0")
        if self.engine not in ENGINES:
            raise UsageError(f"engine must be one of {', '.join(ENGINES)}")
        if self.actors_per_node is not None and self.engine != "ray":
            raise UsageError("--actors-per-node needs --engine ray")
        if self.log_format not in LOG_FORMATS:
            raise UsageError(f"log-format must be one of {', '.join(LOG_FORMATS)}")
        return self


def is_loopback(host: str) -> bool:
    """True for names and addresses only this machine can reach (127/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another name: it may resolve to anything


def flag_fields() -> list:
    """The settings that are ``vqa serve`` flags, in the order of the help."""
    return [f for f in fields(ServeSettings) if f.metadata.get("flag")]
