"""Issue 17: the same answer from every door, and reading only what it may.

A URL and a path holding a NUL byte get one code whichever entry is used (the CLI, a folder
job through ``run_job`` with a job store, ``Scorer.score``); a job goes on past them. The job
store's fingerprint reads a file only through a descriptor checked against the folder it was
found in, so a file swapped for a link outside it between the walk and the read is never read."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from tests.support.clips import textured_frames, write_clip

import vqa.jobstore
from vqa import Scorer, cli
from vqa.inputs import expand_inputs
from vqa.job import run_job
from vqa.jobstore import JobStore

URL = "https://example.com/clip.mp4"
NUL = "uploads/a\0b.mp4"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("doors") / "good.mp4"
    write_clip(path, textured_frames(12, 96, 128, seed=3), fps=25)
    return str(path)


@pytest.fixture(scope="module")
def scorer():
    with Scorer(workers=1, threads=1, frames=8) as s:
        yield s


def test_a_url_gets_one_code_from_every_door(scorer, clip, tmp_path):
    from_library = scorer.score(URL).to_dict()["error"]
    result = CliRunner().invoke(cli.cli, ["score", URL, "--format", "jsonl"])
    from_cli = json.loads(result.stdout.splitlines()[0])["error"]
    with JobStore(str(tmp_path / "j.db")) as store:
        from_job = [o.record["error"] for o in run_job(scorer, [URL, clip], store=store)]
    assert from_library["code"] == from_cli["code"] == from_job[0]["code"] == "E_BAD_PATH"
    assert "URLs are not inputs" in from_library["message"]
    assert from_library["message"] == from_cli["message"] == from_job[0]["message"]
    assert from_job[1] is None  # the job went on


def test_a_nul_byte_path_is_e_bad_path_and_the_job_goes_on(scorer, clip, tmp_path):
    record = scorer.score(NUL).to_dict()
    assert record["status"] == "error" and record["error"]["code"] == "E_BAD_PATH", record["error"]
    assert "NUL" in record["error"]["message"]
    with JobStore(str(tmp_path / "j.db")) as store:
        outcomes = list(run_job(scorer, [NUL, clip, NUL + "x"], store=store))
    assert [o.record["status"] for o in outcomes] == ["error", "ok", "error"]
    assert {o.record["error"]["code"] for o in outcomes if o.record["error"]} == {"E_BAD_PATH"}
    (item,) = expand_inputs([NUL])
    assert item.error[0] == "E_BAD_PATH"


def test_the_fingerprint_never_reads_a_file_swapped_for_a_link_outside_the_folder(
        scorer, clip, tmp_path, monkeypatch):
    folder = tmp_path / "uploads"
    folder.mkdir()
    secret = tmp_path / "secret.mp4"
    secret.write_bytes(open(clip, "rb").read())
    victim = folder / "b.mp4"
    victim.write_bytes(open(clip, "rb").read())
    write_clip(folder / "a.mp4", textured_frames(12, 96, 128, seed=4), fps=25)
    inputs = expand_inputs([str(folder)])  # the walk: b.mp4 is a file inside
    victim.unlink()
    os.symlink(secret, victim)  # swapped before the job reads it

    read = []
    real = vqa.jobstore.fingerprint

    def spy(fd, size):
        read.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd, size)

    monkeypatch.setattr(vqa.jobstore, "fingerprint", spy)
    with JobStore(str(tmp_path / "j.db")) as store:
        outcomes = list(run_job(scorer, inputs, store=store))
    assert [o.record["status"] for o in outcomes] == ["ok", "error"]
    assert outcomes[1].record["error"]["code"] == "E_BAD_PATH"
    assert read and all(p.startswith(str(folder) + os.sep) for p in read), read
    assert str(secret) not in read
