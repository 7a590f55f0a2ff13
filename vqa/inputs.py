"""Turn the paths a user gives into the list of videos to score, one entry per future record.

Files are taken as given, whatever their name. Folders are walked recursively in sorted
order, keeping names that match the video extensions (or ``--glob`` patterns). Directory
symlinks are never followed (they can loop); a file symlink found in a folder is kept only
when it resolves inside that folder, so a link in an upload tree cannot pull in
``/etc/passwd`` or another user's files.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Callable, Iterable

VIDEO_EXTENSIONS = frozenset(
    "mp4 mov mkv webm avi m4v ts mpg mpeg wmv flv 3gp y4m".split())


@dataclass(frozen=True)
class Input:
    """One path to score, or one already known to fail (``error`` is (code, message))."""

    path: str
    error: tuple[str, str] | None = None


def is_video_file(name: str) -> bool:
    return os.path.splitext(name)[1][1:].lower() in VIDEO_EXTENSIONS


def _matcher(patterns: Iterable[str] | None) -> Callable[[str], bool]:
    patterns = list(patterns or [])
    if not patterns:
        return is_video_file
    # Case-insensitive, like the extension test: uploads arrive as .MP4 as often as .mp4.
    lowered = [p.lower() for p in patterns]
    return lambda name: any(fnmatch.fnmatchcase(name.lower(), p) for p in lowered)


def walk_videos(folder: str, *, patterns: Iterable[str] | None = None, on_error=None) -> list[str]:
    """Files under ``folder`` whose names match, recursively, sorted by path.

    Symlinked directories are not followed; symlinks to files are listed (``expand_inputs``
    checks where they lead).
    """
    match = _matcher(patterns)
    found = []
    for root, _dirs, files in os.walk(folder, followlinks=False, onerror=on_error):
        found.extend(os.path.join(root, f) for f in files if match(f))
    return sorted(found)


def _inside(path: str, root_real: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def expand_inputs(paths: Iterable[str], *, patterns: Iterable[str] | None = None,
                  warn: Callable[[str], None] = lambda msg: None) -> list[Input]:
    """Files as given, folders expanded to their videos, in the order given.

    A path that does not exist is kept with E_NOT_FOUND, and a file found in a folder that
    resolves outside it gets E_BAD_PATH, so that each still gets its record.
    """
    inputs: list[Input] = []
    for p in paths:
        p = os.fsdecode(p)
        if os.path.isdir(p):
            root_real = os.path.realpath(p)
            videos = walk_videos(p, patterns=patterns,
                                 on_error=lambda e: warn(f"cannot read {e.filename}: {e.strerror}"))
            if not videos:
                warn(f"no video files found in {p}")
            for v in videos:
                if os.path.islink(v) and not _inside(v, root_real):
                    inputs.append(Input(v, ("E_BAD_PATH", f"{v!r} is a link that leads outside {p!r}")))
                else:
                    inputs.append(Input(v))
        elif not os.path.lexists(p):
            inputs.append(Input(p, ("E_NOT_FOUND", f"no such file or directory: {p}")))
        else:
            inputs.append(Input(p))
    return inputs
