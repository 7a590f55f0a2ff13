"""The ``vqa`` command: parse options, then call the library. The only package that imports click.

    vqa score  -> vqa.cli.score  -> vqa.job.FolderJob (vqa.config.ScoreOptions)
    vqa report -> vqa.cli.report -> vqa.report_html
    vqa bench  -> vqa.cli.bench  -> vqa.bench
    vqa serve  -> vqa.cli.serve  -> vqa.serve (vqa.job.run_folder_job per job)

click and the commands live in ``vqa.cli.app``, imported when the command runs (``main``)
or when ``vqa.cli.cli`` is first read: ``vqa score`` starts its first decode worker before
them (vqa.engine.prestart).

Each command parses, shows progress, handles signals and maps errors to exit statuses; what it
does to a video goes through the library, so a script can do the same without the CLI.
"""
from __future__ import annotations

import io
import os
import stat
import sys
from typing import Any


_SUBMODULES = ("app", "bench", "common", "report", "score", "serve")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as vqa.cli.common.EXIT_SIGINT (not imported here: it loads click)


def __getattr__(name: str) -> Any:
    """``vqa.cli.cli`` (the click group) and the command modules, loaded on first use (PEP 562)."""
    if name == "cli":
        from vqa.cli.app import cli

        return cli
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"vqa.cli.{name}")
    raise AttributeError(f"module 'vqa.cli' has no attribute {name!r}")


def _spare_the_workers_this_script() -> None:
    """Keep spawned decode workers from running the ``vqa`` console script again.

    multiprocessing's spawn runs the parent's main script in each child (as ``__mp_main__``)
    when it was started from a file: for the installed ``vqa`` command that is pip's wrapper,
    which imports this package, click and every command, 0.35 s of a core per worker before
    it opens a video, while the parent compiles the model (issue 18, start-up). A worker's
    code lives in ``vqa.engine.worker``; it needs nothing from the script. ``python -m
    vqa.cli`` is spared already: spawn never re-runs a package's ``__main__``. Only a main
    module that runs this function (``from vqa.cli import main``) loses its file name."""
    script = sys.modules.get("__main__")
    if (script is not None and getattr(script, "__spec__", None) is None and getattr(script, "main", None) is main
            and hasattr(script, "__file__")):
        del script.__file__


def _exit_without_teardown(code: int) -> None:
    """Exit with ``code`` as ``sys.exit`` would, less the interpreter's teardown: tearing
    down OpenVINO, NumPy, OpenCV and the rest took 0.1 to 0.2 s on 2 cores after the last
    record was written (issue 18). The atexit hooks still run (they close engines left
    open), and stdout and stderr are flushed; the command's own files are closed by then.
    Only where nothing else runs: with another thread or a child process alive, the normal
    exit waits for them as it should."""
    import atexit
    import multiprocessing
    import threading

    _stop_an_unused_worker()  # a worker started for a job that needed none (vqa.engine.prestart)
    if threading.active_count() > 1 or multiprocessing.active_children():
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: as at a normal exit, nothing to do
            pass
    os._exit(code)


def _starts_a_worker(args: list[str]) -> bool:
    """Whether ``vqa ARGS`` scores with decode workers, read from the words alone (before
    click and the options are imported): ``vqa score`` without ``--workers 0``, ``--engine``
    or help. A worker started for nothing is stopped again, so this only has to be right
    about the common case."""
    if not args or args[0] != "score":
        return False
    for k, arg in enumerate(args[1:], 1):
        if arg == "--":
            break
        if arg in ("-h", "--help", "--engine", "--actors-per-node", "--workers=0") or arg.startswith("--engine="):
            return False
        if arg == "--workers" and args[k + 1:k + 2] == ["0"]:
            return False
    return True


def _standard_streams() -> None:
    """A command run with stdout or stderr closed (``vqa score ... >&- 2>&-`` in a cron line)
    writes what would go there to /dev/null. Python leaves such a stream None, or (where the
    descriptor was reused before it started, as by a pyenv shim) one that cannot be written,
    and the command stopped on it with exit status 1, before scoring or after every record."""
    from vqa.lifecycle import keep_standard_descriptors

    keep_standard_descriptors()
    for name in ("stdout", "stderr"):
        if not _writable(getattr(sys, name)):
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - for the life of the process
    _stderr_outlives_its_reader()


class _Stderr(io.RawIOBase):
    """Descriptor 2, where a reader that went away (``vqa score -o FILE 2>&1 | head``, a log
    collector that died) sends the rest to /dev/null instead of raising BrokenPipeError: the
    summary line after the last record made a finished job exit 1, its status lost."""

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 2

    def isatty(self) -> bool:
        return os.isatty(2)

    def write(self, data) -> int:
        try:
            return os.write(2, data)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
            return len(data)


def _stderr_outlives_its_reader() -> None:
    stream = sys.stderr
    try:
        if stream.fileno() != 2 or not stat.S_ISFIFO(os.fstat(2).st_mode):
            return  # only a pipe loses its reader (a socket too, rarely used for stderr)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return
    stream.flush()
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(_Stderr()), encoding=stream.encoding,
                                  errors=stream.errors, line_buffering=True, write_through=True)


def _writable(stream) -> bool:
    """False for None, or a stream whose descriptor is closed or open for reading only."""
    if stream is None:
        return False
    try:
        os.write(stream.fileno(), b"")  # EBADF: closed, or not open for writing
    except io.UnsupportedOperation:  # no descriptor (an in-memory stream, a test's capture): as it is
        return True
    except (OSError, ValueError):  # ValueError: the stream itself is closed
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    _standard_streams()
    _spare_the_workers_this_script()
    if _starts_a_worker(sys.argv[1:] if argv is None else list(argv)):
        from vqa.engine import prestart  # imports nothing heavy

        prestart.start()  # starts while the command imports click, the options and the model
    try:
        from vqa.cli.app import cli

        cli.main(args=argv, prog_name="vqa")
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            raise
        _exit_without_teardown(e.code or 0)
    except KeyboardInterrupt:  # Ctrl-C while the command was still being imported: no traceback
        print("vqa: interrupted", file=sys.stderr)
        _exit_without_teardown(EXIT_INTERRUPTED)
    finally:
        _stop_an_unused_worker()


def _stop_an_unused_worker() -> None:
    prestart = sys.modules.get("vqa.engine.prestart")
    if prestart is not None:
        prestart.discard()
