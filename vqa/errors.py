"""One exception root for the package; each error carries a stable code for output records."""
from __future__ import annotations

from vqa.codes import ErrorCode


class VQAError(Exception):
    """Base of every error this package raises on purpose. ``code`` is stable across releases."""

    code: str = ErrorCode.E_INTERNAL

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InputError(VQAError, ValueError):
    """The video cannot be scored: missing, empty, not a video, nothing decodable."""

    code = ErrorCode.E_DECODE


class ModelError(VQAError, RuntimeError):
    """The model file is missing, corrupt or does not match its manifest."""

    code = ErrorCode.E_MODEL


class BackendUnavailable(VQAError, ImportError):
    """A decode or inference backend was asked for but its package is not installed."""

    code = ErrorCode.E_BACKEND


class UsageError(VQAError, ValueError):
    """Options that cannot work together or are out of bounds."""

    code = ErrorCode.E_USAGE


class ResourceError(VQAError):
    """The machine lacks what the run needs (shared memory in /dev/shm): the run's error, never
    a video's; nothing is scored or stored."""

    code = ErrorCode.E_RESOURCE


class OutputError(VQAError):
    """The output or the job store cannot be written (a full disk, a read-only file system)."""

    code = ErrorCode.E_OUTPUT
