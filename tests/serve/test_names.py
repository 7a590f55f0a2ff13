"""Names that are not plain text, through a real server: an upload's file name with bytes that
are not UTF-8 or with U+2028, and a file under a root whose name is not UTF-8. Each comes back
in the output contract's form (lone surrogates and U+2028 escaped in ASCII JSON), and the
server keeps taking jobs afterwards."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.support.malformed_media import good_clip
from tests.support.server import Server, wait_job

pytestmark = pytest.mark.slow

NON_UTF8 = b"b\xfe.mp4"
SEPARATOR = "a\u2028b.mp4"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve-names")
    root = base / "root"
    (root / "odd").mkdir(parents=True)
    clip = good_clip(root, "clip.mp4")
    os.link(clip, os.path.join(os.fsencode(root / "odd"), b"\xff.mp4"))
    srv = Server(root, base / "data")
    srv.clip = Path(clip).read_bytes()
    with srv:
        yield srv


def form(filename: bytes, data: bytes) -> tuple[bytes, dict[str, str]]:
    """A multipart body with ``filename`` as raw bytes in its Content-Disposition."""
    body = (b'--B\r\nContent-Disposition: form-data; name="file"; filename="' + filename
            + b'"\r\nContent-Type: video/mp4\r\n\r\n' + data + b"\r\n--B--\r\n")
    return body, {"content-type": "multipart/form-data; boundary=B"}


def ascii_json(raw: bytes):
    raw.decode("ascii")  # raises past ASCII: U+2028 and lone surrogates are escaped
    return json.loads(raw)


def test_an_upload_job_with_a_non_utf8_name_is_stored_and_nothing_is_stuck(server, validate_record):
    body, headers = form(NON_UTF8, server.clip)
    with server.client() as client:
        r = client.post("/v1/jobs", content=body, headers=headers)
        assert r.status_code == 202, r.text
        job = wait_job(client, r.json()["id"])
        assert job["state"] == "done" and [rec["status"] for rec in job["records"]] == ["ok"]
        record = validate_record(job["records"][0])
        assert os.fsencode(record["path"]) == NON_UTF8  # the client's bytes, back unchanged
        raw = client.get(f"/v1/jobs/{job['id']}/records").content
        assert b"\\udcfe" in raw and ascii_json(raw)["path"] == "b\udcfe.mp4"
        # The writer is not left in a transaction: later jobs and deletes still work.
        again = client.post("/v1/jobs", json={"paths": ["clip.mp4"]})
        assert again.status_code == 202, again.text
        wait_job(client, again.json()["id"])
        assert client.delete(f"/v1/jobs/{job['id']}").status_code == 200
    assert not list((server.data / "uploads").iterdir())


def test_a_single_upload_with_a_non_utf8_name_gets_its_record(server, validate_record):
    body, headers = form(NON_UTF8, server.clip)
    with server.client() as client:
        r = client.post("/v1/score", content=body, headers=headers)
    assert r.status_code == 200, r.text
    record = validate_record(ascii_json(r.content))
    assert os.fsencode(record["path"]) == NON_UTF8 and record["status"] == "ok"


def test_a_job_over_a_file_whose_name_is_not_utf8(server):
    with server.client() as client:
        r = client.post("/v1/jobs", json={"paths": ["odd"]})
        assert r.status_code == 202, r.text
        wait_job(client, r.json()["id"])
        got = client.get(f"/v1/jobs/{r.json()['id']}")
        assert got.status_code == 200, got.text
        assert os.fsencode(ascii_json(got.content)["records"][0]["path"]).endswith(b"/\xff.mp4")
        listed = client.get(f"/v1/jobs/{r.json()['id']}/records", params={"format": "json"})
        assert os.fsencode(ascii_json(listed.content)[0]["path"]).endswith(b"/\xff.mp4")


def test_a_name_with_a_line_separator_comes_back_escaped(server):
    body, headers = form(SEPARATOR.encode(), server.clip)
    with server.client() as client:
        one = client.post("/v1/score", content=body, headers=headers)
        assert one.status_code == 200 and b"\\u2028" in one.content
        assert ascii_json(one.content)["path"] == SEPARATOR
        r = client.post("/v1/jobs", content=body, headers=headers)
        job = wait_job(client, r.json()["id"])
        assert job["records"][0]["path"] == SEPARATOR
        for url in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/records"):
            raw = client.get(url).content
            assert b"\\u2028" in raw and len(raw.decode("ascii").splitlines()) == 1, url
