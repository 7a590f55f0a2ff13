"""Which paths a job may name: files and folders under one of the ``--root`` folders.

A named path is refused whole (``PathRefused``, 403) when it has a ``..`` component, a NUL
byte, or leads (after every symlink) outside every root. What is left is expanded exactly as
``vqa score`` expands its arguments (``vqa.inputs.expand_inputs``), with one difference: a
file named in the request is confined to its root like a file found in a folder, so the
decoder checks again, on the descriptor it opens, that it still leads inside (a link swapped in
after this check gets ``E_BAD_PATH``, as in a folder job). Non-regular files, dangling links
and the rest get their error records from the same code as on the command line.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from vqa.codes import ErrorCode
from vqa.errors import UsageError
from vqa.files import FoundPath, inside
from vqa.inputs import Input, expand_inputs


class PathRefused(UsageError):
    """A path the request may not name; the request is refused before anything is queued."""

    code = ErrorCode.E_BAD_PATH


class TooManyInputs(UsageError):
    """A job over the server's --max-inputs; refused before anything is stored."""

    code = ErrorCode.E_TOO_LARGE


class Roots:
    def __init__(self, roots: Iterable[str]):
        self.given = [os.fspath(r) for r in roots]
        self.real = [os.path.realpath(r) for r in self.given]

    def root_of(self, path: str) -> str | None:
        """The real path of the root ``path`` leads into, or None."""
        real = os.path.realpath(path)
        return next((root for root in self.real if inside(real, root)), None)

    def resolve(self, paths: Iterable[str], *, patterns: Iterable[str] | None = None,
                limit: int | None = None) -> list[Input]:
        """One Input per video, in the order given (folders walked, sorted), each file once
        however often it is named or found; PathRefused for a path outside the roots,
        TooManyInputs past ``limit`` videos. A relative path is taken from the first root."""
        named: dict[str, tuple[str, str]] = {}  # normalised -> (as given, root): each path walked once
        for path in paths:
            if not isinstance(path, str) or not path or "\0" in path or not _encodable(path):
                raise PathRefused(f"not a path: {path!r}")
            if ".." in path.split("/"):
                raise PathRefused(f"{path!r} has a '..' component; name the file by its path under a root")
            full = path if os.path.isabs(path) else os.path.join(self.given[0], path)
            root = self.root_of(full)
            if root is None:
                raise PathRefused(f"{path!r} is not under any --root of this server")
            named.setdefault(os.path.normpath(full), (full, root))
        inputs: list[Input] = []
        seen: dict[tuple, str] = {}  # each file once, as vqa score: expand_inputs keeps count
        for full, root in named.values():
            inputs += [self._confine(item, root) for item in expand_inputs([full], patterns=patterns, seen=seen)]
            _check_limit(len(inputs), limit)  # after each walk: a long list of folders stops early
        return inputs

    @staticmethod
    def _confine(item: Input, root: str) -> Input:
        if item.error is not None:
            return item
        if isinstance(item.path, FoundPath):  # found in a folder: confined to it, which is under root
            if inside(item.path.root, root):
                return item
            return Input(str(item.path), (ErrorCode.E_BAD_PATH, f"{str(item.path)!r} leads outside the server's roots"))
        return Input(FoundPath(item.path, root))


def _encodable(path: str) -> bool:
    """False for a lone surrogate os.fsencode cannot turn back into bytes (JSON may carry one)."""
    try:
        os.fsencode(path)
        return True
    except UnicodeEncodeError:
        return False


def _check_limit(count: int, limit: int | None) -> None:
    if limit is not None and count > limit:
        raise TooManyInputs(f"the job has more than {limit} videos, the most this server takes in one job "
                            f"(--max-inputs {limit}); split it")
