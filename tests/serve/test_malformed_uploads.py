"""Every hostile file of tests/support/malformed_media.py and tests/support/lying_streams.py, uploaded to a real
server one by one and then all in one job between good clips: each gets the record it gets
from ``vqa score``, and the server keeps serving."""
from __future__ import annotations

import os

import pytest
from tests.support import malformed_media as hostile
from tests.support import lying_streams as hostile_streams
from tests.support.server import Server, multipart, wait_job

pytestmark = pytest.mark.slow

# Cases about the file system, not the bytes (a FIFO, a link loop, names): nothing to upload.
NOT_UPLOADABLE = {"fifo", "symlink_loop", "non_utf8_name", "newline_name"}
CASES = {name: case[:4] for name, case in {**hostile.CASES, **hostile_streams.CASES}.items()
         if name not in NOT_UPLOADABLE}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hostile-uploads")
    made = {}
    for name, (make, *_expected) in CASES.items():
        (root / name).mkdir()
        made[name] = os.fsdecode(make(root / name))
    return made


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-hostile")
    (base / "root").mkdir()
    srv = Server(base / "root", base / "data")
    with srv:
        yield srv


def check(record: dict, name: str, path: str, validate_record) -> None:
    _make, status, code, warnings = CASES[name]
    validate_record(record)
    assert record["path"] == os.path.basename(path)
    assert (record["status"], (record["error"] or {}).get("code")) == (status, code), (name, record["error"])
    codes = {w.split(":", 1)[0] for w in record["warnings"]}
    for wanted in warnings:  # "A|B": either code will do
        assert codes & set(wanted.split("|")), (name, record["warnings"])


def test_each_hostile_upload_gets_its_record(server, files, validate_record):
    with server.client() as client:
        for name, path in files.items():
            r = client.post("/v1/score", files=multipart([path]))
            assert r.status_code == 200, (name, r.text)
            check(r.json(), name, path, validate_record)
            assert client.get("/healthz").json()["ok"], name
    assert not list((server.data / "uploads").iterdir())


def test_hostile_uploads_as_one_job_between_good_clips(server, files, tmp_path, validate_record):
    good = [hostile.good_clip(tmp_path, f"good{i}.mp4", seed=i) for i in range(len(files) + 1)]
    order = [good[0]]
    for i, path in enumerate(files.values()):
        order += [path, good[i + 1]]  # each hostile file between two good clips
    with server.client() as client:
        r = client.post("/v1/jobs", files=multipart(order))
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        records = job["records"]
        assert job["state"] == "done" and len(records) == len(order)
        for record, (name, path) in zip(records[1::2], files.items()):
            check(record, name, path, validate_record)
        assert all(rec["status"] == "ok" for rec in records[0::2])
        after = client.post("/v1/score", files=multipart([good[0]]))  # still serving, same answer
        assert after.json()["score"] == records[0]["score"]
