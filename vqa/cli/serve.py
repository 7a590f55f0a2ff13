"""``vqa serve``: flags -> ServeSettings (with a ScoreOptions, the same flags as ``vqa score``)
-> vqa.serve. Every flag is made from the settings' own metadata (``ServeSettings`` fields, as
``vqa score``'s are from ``ScoreOptions``): a setting's name, default, bounds and help live there
once. The web stack (the ``serve`` extra) is imported only when the command runs, so ``vqa
--help`` and ``vqa score`` never need it."""
from __future__ import annotations

import os
from dataclasses import MISSING
from typing import Any

import click

from vqa.cli.common import EXIT_USAGE, debug, fail, score_options
from vqa.codes import ErrorCode
from vqa.config import ScoreOptions
from vqa.errors import VQAError
from vqa.serve.callbacks import SECRET_ENV
from vqa.serve.settings import TOKEN_ENV, ServeSettings, flag_fields


def _option(f):
    """The click option of one ServeSettings field."""
    m = f.metadata
    unit = m["unit"]
    default = None if f.default is MISSING else f.default  # a factory's default depends on the environment
    kwargs: dict[str, Any] = {"help": m["help"] or None}
    kind = m["kind"]
    if kind == "many":
        kwargs.update(multiple=True)
        if f.name == "roots":
            kwargs.update(required=True, type=click.Path(file_okay=False, exists=True))
    elif kind == "bool":
        kwargs.update(is_flag=True)
    elif kind == "choice":
        kwargs.update(type=click.Choice(m["choices"]), default=default, show_default=True)
    elif kind == "str":
        kwargs.update(default=default, show_default=default is not None)
        if f.name == "data_dir":
            kwargs.update(type=click.Path(file_okay=False))
    else:
        number = click.IntRange if kind == "int" else click.FloatRange
        bounds = {"min": m["minimum"], "max": m["maximum"]}
        if kind == "float" and m["minimum"] is None:
            bounds.update(min=0, min_open=True)
        kwargs.update(type=number(**bounds), default=default if unit == 1 else default // unit, show_default=True)
    return click.option(m["flag"], f.name, **kwargs)


def serve_flags(command):
    for f in reversed(flag_fields()):
        command = _option(f)(command)
    return command


@click.command("serve")
@serve_flags
@score_options
def serve(**values):
    """Serve scoring over HTTP: jobs over files under --root, single uploads, records as they
    arrive, HTML reports, /healthz and /metrics. OpenAPI docs at /docs.

    Needs the serve extra: pip install '.[serve]' in vqa's checkout. One model and one pool of
    decode workers serve every request. SIGTERM finishes the videos in flight (within --drain-timeout),
    stores them and exits with status 143; the next start carries on with the queued jobs.
    """
    try:
        from vqa.serve.server import serve as run
    except ImportError as e:
        fail(ErrorCode.E_BACKEND, f"vqa serve needs the serve extra: pip install '.[serve]' in vqa's checkout ({e})",
             EXIT_USAGE)
    given: dict[str, Any] = {}
    for f in flag_fields():
        value = values.pop(f.name)
        if value is None:
            continue  # the setting's own default (data_dir's depends on the environment)
        if f.metadata["kind"] == "many":
            value = list(value) if f.name == "roots" else tuple(value)
        given[f.name] = value * f.metadata["unit"] if f.metadata["unit"] != 1 else value
    given["token"] = given.get("token") or os.environ.get(TOKEN_ENV) or None
    given["callback_secret"] = given.get("callback_secret") or os.environ.get(SECRET_ENV) or None
    settings = ServeSettings(**given, options=ScoreOptions(**values))
    try:
        run(settings)
    except VQAError as e:
        if debug():
            raise
        fail(e.code, e.message, EXIT_USAGE)
