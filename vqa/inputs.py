"""Turn the paths a user gives into the list of videos to score, one entry per future record.

Files are taken as given, whatever their name. Folders are walked recursively in sorted
order, keeping names that match the video extensions (or ``--glob`` patterns). Directory
symlinks are never followed (they can loop); a file symlink found in a folder is kept only
when it resolves inside that folder, so a link in an upload tree cannot pull in
``/etc/passwd`` or another user's files.

Each file is scored and recorded once, however often it is named or found (``input_key``
says when two inputs are one file): ``vqa score``, ``vqa.job.run_folder_job`` and the
service's jobs all expand their paths here.
"""
from __future__ import annotations

import errno
import fnmatch
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from vqa.codes import ErrorCode
from vqa.files import FoundPath, bad_path, inside, is_url, missing

# The names a folder walk takes: the extensions of the containers and streams the decoders
# read (vqa.decode.base.VIDEO_FORMATS), by FFmpeg demuxer. GIF is read when named or matched
# by --glob, but not walked: an upload folder's GIFs are mostly pictures.
VIDEO_EXTENSIONS = frozenset("""
    mp4 mov m4v 3gp 3g2 mj2
    mkv webm
    avi
    ts m2ts mts
    mpg mpeg m2v vob
    wmv asf
    flv ivf obu
    h264 264 hevc h265 265 vvc 266
    mjpeg mjpg
    y4m nut ogv mxf dv
""".split())


@dataclass(frozen=True)
class Input:
    """One path to score, or one already known to fail (``error`` is (code, message))."""

    path: str
    error: tuple[str, str] | None = None


def path_arg(path: object) -> str:
    """One path as a str; anything else is a TypeError (a list of paths is not one path)."""
    if isinstance(path, (str, bytes, os.PathLike)):
        return os.fsdecode(path)
    raise TypeError(f"a video path must be a str, bytes or os.PathLike, not {type(path).__name__}")


def resolved_here(path: str) -> str:
    """``path`` joined to this process's current folder, now. Decode workers keep the folder
    the Scorer was made in, so a relative path sent to them as it is would name a file there,
    whatever folder the caller has moved to since. Not normalised: ``a/../b`` stays as the OS
    resolves it, through links. Where the current folder was deleted, through this process's
    /proc entry for it, which leads nowhere (E_NOT_FOUND), as the path itself does here."""
    if os.path.isabs(path) or is_url(path):  # a URL is no file here or there: E_BAD_PATH as it is
        return path
    try:
        here = os.getcwd()
    except OSError:
        here = f"/proc/{os.getpid()}/cwd"
    joined = os.path.join(here, path)
    root = getattr(path, "root", None)  # a path found in a folder keeps the folder it must stay in
    return FoundPath(joined, root) if root is not None else joined


def is_video_file(name: str) -> bool:
    return os.path.splitext(name)[1][1:].lower() in VIDEO_EXTENSIONS


def _matcher(patterns: Iterable[str] | None) -> Callable[[str], bool]:
    patterns = list(patterns or [])
    if not patterns:
        return is_video_file
    # Case-insensitive, like the extension test: uploads arrive as .MP4 as often as .mp4.
    lowered = [p.lower() for p in patterns]
    return lambda name: any(fnmatch.fnmatchcase(name.lower(), p) for p in lowered)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link loop, a link into a folder we may not read: not a folder to walk
        return False


def walk_videos(folder: str, *, patterns: Iterable[str] | None = None,
                on_error: Callable[[str, OSError], None] | None = None) -> list[str]:
    """Files under ``folder`` whose names match, recursively, sorted by path.

    Symlinked directories are not followed; symlinks to files are listed (``expand_inputs``
    checks where they lead, and so does the decoder when it opens them). Each folder is opened
    relative to its parent's descriptor, with no-follow semantics, so the walk neither depends
    on PATH_MAX (a tree 500 levels deep is walked whole: its paths can be longer than any the
    system opens) nor follows a folder swapped for a link while it runs. ``on_error(path,
    OSError)`` hears of each folder that cannot be read.
    """
    match = _matcher(patterns)
    found: list[str] = []
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(folder, flags)
    except OSError as exc:
        if on_error is not None:
            on_error(folder, exc)
        return found
    stack: list[tuple[int, str, Iterator[str]]] = []  # (descriptor, path, subfolders to visit)

    def visit(fd: int, path: str) -> None:
        subdirs = []
        try:
            with os.scandir(fd) as entries:
                for e in entries:
                    if _is_dir(e):  # a link to a folder is a folder too, and never followed
                        if not e.is_symlink():
                            subdirs.append(e.name)
                    elif match(e.name):
                        found.append(os.path.join(path, e.name))
        except OSError as exc:
            if on_error is not None:
                on_error(path, exc)
        stack.append((fd, path, iter(sorted(subdirs))))

    visit(top, folder)
    while stack:
        fd, path, subdirs = stack[-1]
        name = next(subdirs, None)
        if name is None:
            os.close(fd)
            stack.pop()
            continue
        child = os.path.join(path, name)
        try:
            child_fd = os.open(name, flags | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP and on_error is not None:  # ELOOP: now a symlink, skipped
                on_error(child, exc)
            continue
        visit(child_fd, child)
    return sorted(found)


def input_key(item: Input, *, real: str | None = None) -> tuple[str, str]:
    """Which file ``item`` is, so that each is scored once: its real path (``os.path.realpath``:
    absolute, every symlink, ``.`` and ``..`` resolved; ``real`` when the caller knows it
    already). A file found in a folder and named again, ``DIR/./a.mp4`` and a symlink to it are
    one file; the first of them is kept. Hard links are names of their own, each with its
    record, as ``ls`` lists them. An input refused already (missing, a link leading out of its
    folder) is one per name as given, made absolute: its record is about that name, not about
    where it leads."""
    if item.error is None:
        return ("real", os.path.realpath(item.path) if real is None else real)
    return ("name", os.path.normpath(os.path.abspath(item.path)))


def _once(keyed: Iterable[tuple[tuple, Input]], seen: dict[tuple, str], warn: Callable[[str], None]) -> list[Input]:
    """The inputs whose key is not in ``seen`` yet (which learns them), in order; ``warn`` hears
    once how many were left out."""
    kept: list[Input] = []
    again: list[tuple[str, str]] = []
    for key, item in keyed:
        if key in seen:
            again.append((item.path, seen[key]))
        else:
            seen[key] = item.path
            kept.append(item)
    if again:
        path, first = again[0]
        known = "" if path == first else f" (as {first!r})"
        also = f", and {len(again) - 1} more paths did" if len(again) > 1 else ""
        warn(f"{path!r} named a file already in the job{known}{also}: each file is scored once")
    return kept


def expand_inputs(paths: Iterable[str | Input], *, patterns: Iterable[str] | None = None,
                  warn: Callable[[str], None] = lambda msg: None, seen: dict[tuple, str] | None = None) -> list[Input]:
    """Files as given, folders expanded to their videos, in the order given, each file once:
    the first time it is named or found (``input_key``). ``seen``: the files of the job so far
    (``input_key`` -> path), for a caller that expands a job's paths a few at a time; it learns
    the files found here.

    A path that does not exist is kept with E_NOT_FOUND (a URL is told that URLs are not
    inputs), a file found in a folder that resolves outside it gets E_BAD_PATH, and a folder
    inside that cannot be read gets E_UNREADABLE, so that each still gets its record and the
    exit status counts it. Files found in a folder are ``FoundPath``s: the decoder checks again,
    when it opens one, that it still leads inside that folder. An ``Input`` among ``paths`` is
    expanded already and is kept as it is.
    """
    keyed: list[tuple[tuple, Input]] = []
    for p in paths:
        if isinstance(p, Input):  # expanded already (a job a service stored): kept as it is
            keyed.append((input_key(p), p))
            continue
        p = os.fsdecode(p)
        problem = bad_path(p)
        if problem is not None:
            keyed.append(_keyed(Input(p, (problem.code, problem.message))))
        elif os.path.isdir(p):
            keyed.extend(_walked(p, patterns, warn))
        elif not os.path.lexists(p):
            problem = missing(p)  # the rule the decoder's open applies too
            keyed.append(_keyed(Input(p, (problem.code, problem.message))))
        else:
            keyed.append(_keyed(Input(p)))
    return _once(keyed, {} if seen is None else seen, warn)


def _keyed(item: Input) -> tuple[tuple, Input]:
    return input_key(item), item


def _walked(folder: str, patterns: Iterable[str] | None, warn: Callable[[str], None]) -> list[tuple[tuple, Input]]:
    """The videos under ``folder``, sorted, each with its ``input_key``."""
    root_real = os.path.realpath(folder)
    unreadable: list[Input] = []
    videos = walk_videos(folder, patterns=patterns, on_error=lambda path, e: unreadable.append(
        Input(path, (ErrorCode.E_UNREADABLE, f"cannot read the folder {path!r}: {e.strerror}; "
                                             "the videos in it, if any, were not scored"))))
    if not videos and not unreadable:
        warn(f"no video files found in {folder}")
    found = []
    for v in videos:
        if os.path.islink(v):
            real = os.path.realpath(v)
            if not inside(real, root_real):
                found.append(_keyed(Input(v, (ErrorCode.E_BAD_PATH, f"{v!r} is a link that leads outside {folder!r}"))))
                continue
        else:  # the walk enters no linked folder: the real path is the folder's, then the names
            real = os.path.join(root_real, v[len(folder):].lstrip("/"))  # v is os.path.join(folder, ...)
        item = Input(FoundPath(v, root_real))
        found.append((input_key(item, real=real), item))
    for item in unreadable:
        if item.error is not None:  # each has one: it was made for its error
            warn(item.error[1])
    return sorted(found + [_keyed(item) for item in unreadable], key=lambda pair: pair[1].path)
