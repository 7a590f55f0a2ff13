"""What every ``vqa`` subcommand shares: exit statuses, the one-line error, and the flags made
from ``vqa.config.ScoreOptions`` (each option's flag, help, parser and choices are defined
there, once)."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any, NoReturn

import click

from vqa.codes import ErrorCode
from vqa.config import cli_fields

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM  # 130, 143: interrupted
EXIT_SIGPIPE = 128 + signal.SIGPIPE  # 141: the output's reader went away, as a shell reports `yes | head`

EXIT_CODES_HELP = f"""\b
Exit status:
  0  every video was scored
  1  some videos failed; each still has a record with status "error"
  2  usage error: bad option, missing model or backend, or a resource the
     machine lacks ({ErrorCode.E_RESOURCE}: /dev/shm too full); nothing scored
  3  the run stopped early: an internal error, or the output or the job
     store could not be written ({ErrorCode.E_OUTPUT}); records so far are valid and in
     the job store
  130, 143  interrupted by Ctrl-C (SIGINT) or SIGTERM; records so far are
     written and stored: run the same command again to resume
  141  the output's reader went away (`vqa score DIR | head`, a FIFO's
     reader closed): the rest was not written
Set VQA_DEBUG=1 to see the traceback instead of a one-line error."""


def debug() -> bool:
    return os.environ.get("VQA_DEBUG", "") not in ("", "0")


def fail(code: str, message: str, status: int) -> NoReturn:
    click.echo(f"error: {code}: {message}", err=True)
    sys.exit(status)


class Parsed(click.ParamType):
    """A ScoreOptions field's own parser as a click type (its ValueError is the usage error)."""

    def __init__(self, name: str, parse):
        self.name, self._parse = name, parse

    def convert(self, value: Any, param, ctx):
        if not isinstance(value, str):
            return value  # a default, already a value
        try:
            return self._parse(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


_OWN = object()


def option_for(f, *, default: Any = _OWN, help: str | None = None):
    """The click option of one ScoreOptions field (``default``/``help``: where a command
    differs, e.g. vqa bench's sampling)."""
    m = f.metadata
    kwargs: dict[str, Any] = {"help": help or m["help"], "default": f.default if default is _OWN else default}
    if m["choices"]:
        kwargs.update(type=click.Choice(m["choices"]), show_default=m["show_default"])
    elif m["parse"]:
        kwargs.update(type=Parsed(m["metavar"], m["parse"]), show_default=m["show_default"])
    elif m["existing_dir"]:
        kwargs.update(type=click.Path(file_okay=False, exists=True))
    else:
        kwargs.update(is_flag=True)
    return click.option(m["flag"], f.name, **kwargs)


def score_options(command):
    """Decorate ``command`` with a flag for each ScoreOptions field, in the fields' order."""
    for f in reversed(cli_fields()):
        command = option_for(f)(command)
    return command
