"""``vqa serve`` meeting faults an operator meets: a damaged or foreign job list or results
store (exit 2, one line saying what to do), a full data disk (507 ``E_NO_SPACE``), and the
flags, made from one definition (``ServeSettings``)."""
from __future__ import annotations

import dataclasses
import os
import resource
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner
from tests.support.malformed_media import good_clip
from tests.support.server import REPO, Server, error

from vqa.cli import cli
from vqa.serve import server as serve_module
from vqa.serve.settings import ServeSettings, flag_fields


def start(root, data) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("VQA_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "vqa.cli", "serve", "--root", str(root), "--data", str(data),
                           "--port", "0", "--workers", "0"], capture_output=True, text=True, env=env, timeout=120)


def damage(data, name: str, how: str) -> None:
    path = data / name
    if how == "garbage":
        path.write_bytes(b"this is not an sqlite database at all" * 100)
    elif how == "folder":
        path.mkdir()
    else:  # another program's database of that name
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE jobs (name TEXT, salary REAL)")


@pytest.mark.parametrize("name, how", [("jobs.db", "garbage"), ("jobs.db", "folder"), ("jobs.db", "foreign"),
                                       ("results.vqa.db", "garbage"), ("results.vqa.db", "foreign")])
def test_a_damaged_or_foreign_store_stops_the_start_with_one_line_saying_what_to_do(tmp_path, name, how):
    (tmp_path / "root").mkdir()
    data = tmp_path / "data"
    data.mkdir()
    damage(data, name, how)
    proc = start(tmp_path / "root", data)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: E_USAGE:"), proc.stderr
    assert name in lines[0] and "move" in lines[0] and "--db" not in lines[0], lines[0]


@pytest.mark.slow
def test_a_full_data_disk_is_507_and_the_server_carries_on(tmp_path):
    """A file-size limit stands in for a full disk (the same failed write). Before: 500
    E_INTERNAL "please report it"."""
    root = tmp_path / "root"
    root.mkdir()
    good_clip(root, "clip0.mp4")
    limit = 1 << 20
    # --workers 0: no shared-memory ring, which the file-size limit would refuse too
    with Server(root, tmp_path / "data", "--workers", "0", limits={resource.RLIMIT_FSIZE: (limit, limit)}) as srv:
        with srv.client() as client:
            big = b"\0" * (2 * limit)
            message = error(client.post("/v1/score", params={"name": "big.mp4"}, content=big), 507, "E_NO_SPACE")
            assert "full" in message
            error(client.post("/v1/jobs", files={"file": ("big.mp4", big)}), 507, "E_NO_SPACE")
            assert not list((srv.data / "uploads").iterdir())  # the partial files are gone
            assert client.get("/healthz").status_code == 200
            assert client.post("/v1/score", files={"file": ("c.mp4", (root / "clip0.mp4").read_bytes())}
                               ).status_code == 200


def test_every_setting_is_a_flag_with_the_settings_own_default(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(serve_module, "serve", seen.append)
    monkeypatch.delenv("VQA_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("VQA_SERVE_CALLBACK_SECRET", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--root", str(tmp_path), "--data", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert seen == [ServeSettings(roots=[str(tmp_path)], data_dir=str(tmp_path / "d"))]
    help_text = CliRunner().invoke(cli, ["serve", "--help"]).output
    for f in flag_fields():
        assert f.metadata["flag"] in help_text, f.name
    named = {f.name for f in flag_fields()} | {"options"}
    assert named == {f.name for f in dataclasses.fields(ServeSettings)}  # no setting without its flag
    # A flag in other units sets the setting in bytes.
    CliRunner().invoke(cli, ["serve", "--root", str(tmp_path), "--data", str(tmp_path / "d"), "--max-body-kb", "3",
                             "--allow-host", "a.lan", "--allow-host", "b.lan"])
    assert seen[-1].max_body_bytes == 3 << 10 and seen[-1].allow_hosts == ("a.lan", "b.lan")
