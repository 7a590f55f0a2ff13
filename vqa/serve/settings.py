"""The service's options, and the checks made before anything starts: where it may listen
without a token, and where its own files live (never where a request could name them)."""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

from vqa.config import ScoreOptions
from vqa.errors import UsageError
from vqa.files import inside

TOKEN_ENV = "VQA_SERVE_TOKEN"  # the bearer token, when --token is not given
DEFAULT_PORT = 8750


def default_data_dir() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "vqa", "serve")


@dataclass(frozen=True)
class ServeSettings:
    roots: list[str]  # the folders whose files a job may name
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: str = field(default_factory=default_data_dir)  # jobs.db, the results store, uploads
    token: str | None = None
    allow_no_token: bool = False  # listen beyond localhost without a token, on purpose
    queue_jobs: int = 64  # jobs queued or running at once; past it, 429
    queue_uploads: int = 16  # single uploads waiting or scoring at once; past it, 429
    max_body_bytes: int = 1 << 20  # a JSON request body
    max_upload_bytes: int = 2 << 30  # one upload request's body, all its files together
    max_inputs: int = 100_000  # videos in one job, after its folders are walked; past it, 413
    # A body must keep arriving: by body_timeout_s + n / min_body_rate seconds it must be past
    # byte n, else 408 and its place is given back (an idle client would hold it for good).
    body_timeout_s: float = 60.0
    min_body_rate: int = 16 << 10  # bytes per second; 0: the whole body within body_timeout_s
    drain_timeout_s: float = 30.0  # on SIGTERM: how long videos in flight may take to finish
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
        return self


def is_loopback(host: str) -> bool:
    """True for names and addresses only this machine can reach (127/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another name: it may resolve to anything
