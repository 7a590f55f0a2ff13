"""The service's rules without a server: where it may listen, which paths a job may name,
how uploads are received, and the metrics text. Quick: no model, no process."""
from __future__ import annotations

import asyncio
import os

import pytest
from click.testing import CliRunner

from vqa.cli import cli
from vqa.errors import UsageError
from vqa.files import FoundPath
from vqa.serve.metrics import Metrics
from vqa.serve.paths import PathRefused, Roots
from vqa.serve.settings import ServeSettings, is_loopback
from vqa.serve.uploads import BadUpload, TooLarge, receive


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "day1").mkdir(parents=True)
    outside.mkdir()
    (root / "day1" / "a.mp4").write_bytes(b"x")
    (outside / "secret.mp4").write_bytes(b"x")
    (root / "out.mp4").symlink_to(outside / "secret.mp4")
    (root / "in.mp4").symlink_to(root / "day1" / "a.mp4")
    (root / "day1" / "zz_out.mp4").symlink_to(outside / "secret.mp4")
    return root, outside


@pytest.mark.parametrize("host, ok", [("127.0.0.1", True), ("127.0.0.9", True), ("::1", True), ("localhost", True),
                                      ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("myhost", False)])
def test_beyond_localhost_needs_a_token_or_an_explicit_allow(tmp_path, host, ok):
    assert is_loopback(host) == ok
    settings = ServeSettings(roots=[str(tmp_path)], host=host, data_dir=str(tmp_path.parent / "data"))
    if ok:
        settings.checked()
    else:
        with pytest.raises(UsageError, match="no token is set"):
            settings.checked()
        ServeSettings(roots=[str(tmp_path)], host=host, token="t", data_dir=str(tmp_path.parent / "d")).checked()
        ServeSettings(roots=[str(tmp_path)], host=host, allow_no_token=True, data_dir=str(tmp_path.parent / "d")
                      ).checked()


def test_the_command_refuses_a_public_address_without_a_token(tmp_path):
    result = CliRunner().invoke(cli, ["serve", "--root", str(tmp_path), "--host", "0.0.0.0",
                                      "--data", str(tmp_path.parent / "data")], env={"VQA_SERVE_TOKEN": ""})
    assert result.exit_code == 2 and "E_USAGE" in result.output and "--allow-no-token" in result.output


def test_the_data_folder_may_not_overlap_a_root(tmp_path):
    for data in (tmp_path / "data", tmp_path):
        with pytest.raises(UsageError, match="overlap"):
            ServeSettings(roots=[str(tmp_path)], data_dir=str(data)).checked()


@pytest.mark.parametrize("name", ["../outside/secret.mp4", "day1/../../outside/secret.mp4", "out.mp4", "/etc/passwd",
                                  "OUTSIDE", "", "a\0b"])
def test_paths_outside_the_roots_are_refused(tree, name):
    root, outside = tree
    path = str(outside) if name == "OUTSIDE" else name
    with pytest.raises(PathRefused):
        Roots([root]).resolve([str(root / "day1" / "a.mp4"), path])


def test_paths_inside_are_expanded_as_the_cli_does_and_confined_to_their_root(tree):
    root, _outside = tree
    # in.mp4 leads to day1/a.mp4: one file, scored once, under the name it had first.
    inputs = Roots([root]).resolve([str(root / "in.mp4"), "day1", "missing.mp4"])
    paths = [os.path.relpath(i.path, root) for i in inputs]
    assert paths == ["in.mp4", "day1/zz_out.mp4", "missing.mp4"]
    assert [i.error and i.error[0] for i in inputs] == [None, "E_BAD_PATH", "E_NOT_FOUND"]
    named = inputs[0].path
    assert isinstance(named, FoundPath) and named.root == os.path.realpath(root)  # checked again at open


def _chunks(body: bytes, size: int = 7):
    async def gen():
        for i in range(0, len(body), size):
            yield body[i:i + size]
    return gen()


def _form(*parts: tuple[str, str | None, bytes]) -> tuple[bytes, str]:
    body = b""
    for field, filename, data in parts:
        disposition = f'form-data; name="{field}"' + (f'; filename="{filename}"' if filename is not None else "")
        body += b"--B\r\nContent-Disposition: " + disposition.encode() + b"\r\n\r\n" + data + b"\r\n"
    return body + b"--B--\r\n", "multipart/form-data; boundary=B"


def test_uploads_land_in_the_folder_under_safe_names(tmp_path):
    body, kind = _form(("file", "../../etc/cron.d/x.MP4", b"one"), ("note", None, b"ignored"),
                       ("file", "two\nlines.webm", b"two" * 100), ("file", "noext", b"3"))
    got = asyncio.run(receive(_chunks(body), kind, str(tmp_path), limit=10_000))
    assert [(os.path.basename(u.path), u.name) for u in got] == [
        ("000000.mp4", "x.MP4"), ("000001.webm", "two\nlines.webm"), ("000002", "noext")]
    assert [open(u.path, "rb").read() for u in got] == [b"one", b"two" * 100, b"3"]
    assert {oct(os.stat(u.path).st_mode & 0o777) for u in got} == {"0o600"}
    (tmp_path / "r").mkdir()
    raw = asyncio.run(receive(_chunks(b"raw bytes"), "application/octet-stream", str(tmp_path / "r"), limit=100,
                              name="a/b.mkv"))
    assert raw[0].name == "b.mkv" and open(raw[0].path, "rb").read() == b"raw bytes"


def test_uploads_over_the_limit_or_without_a_file_are_refused(tmp_path):
    body, kind = _form(("file", "a.mp4", b"x" * 1000))
    with pytest.raises(TooLarge):
        asyncio.run(receive(_chunks(body, 100), kind, str(tmp_path), limit=500))
    body, kind = _form(("note", None, b"no file here"))
    with pytest.raises(BadUpload, match="no file"):
        asyncio.run(receive(_chunks(body), kind, str(tmp_path), limit=10_000))
    with pytest.raises(BadUpload, match="boundary"):
        asyncio.run(receive(_chunks(b"x"), "multipart/form-data", str(tmp_path), limit=10_000))


def test_metrics_text_is_prometheus_exposition():
    m = Metrics()
    m.record({"status": "ok", "error": None}, "job")
    m.record({"status": "error", "error": {"code": "E_NOT_VIDEO"}}, "upload")
    for s in (0.02, 0.3, 400):
        m.observe(s)
    m.request("/v1/score", 429)
    text = m.text({"vqa_queue_jobs": ("Jobs queued or running", lambda: {"": 3})})
    lines = text.splitlines()
    assert 'vqa_videos_total{source="job",status="ok"} 1' in lines
    assert 'vqa_errors_total{code="E_NOT_VIDEO"} 1' in lines
    assert 'vqa_video_seconds_bucket{le="0.05"} 1' in lines and 'vqa_video_seconds_bucket{le="+Inf"} 3' in lines
    assert "vqa_video_seconds_count 3" in lines and "vqa_queue_jobs 3" in lines
    assert 'vqa_http_requests_total{route="/v1/score",status="429"} 1' in lines
    for line in lines:  # every sample line: name{labels} number
        assert line.startswith("#") or len(line.rsplit(" ", 1)) == 2 and float(line.rsplit(" ", 1)[1]) >= 0


def test_one_server_per_data_folder(tmp_path):
    from vqa.serve.jobs import JobDB

    first = JobDB(str(tmp_path / "jobs.db"))
    try:
        with pytest.raises(UsageError, match="another vqa serve"):
            JobDB(str(tmp_path / "jobs.db"))
    finally:
        first.close()
    JobDB(str(tmp_path / "jobs.db")).close()  # free again once the first is closed


def test_a_failed_write_is_rolled_back_and_later_ones_work(tmp_path):
    import sqlite3

    from vqa.inputs import Input
    from vqa.serve.jobs import JobDB

    db = JobDB(str(tmp_path / "jobs.db"))
    try:
        db.add("a", "paths", [(Input("/x.mp4"), None)])
        with pytest.raises(sqlite3.IntegrityError):  # fails after BEGIN: the same id again
            db.add("a", "paths", [(Input("/y.mp4"), None)])
        db.add("b", "upload", [(Input("/z.mp4"), "b\udcfe\u2028.mp4")])  # a name with undecodable bytes
        assert db.delete("a") and db.job("a") is None
        assert [(i.input.path, i.name) for i in db.pending("b")] == [("/z.mp4", "b\udcfe\u2028.mp4")]
    finally:
        db.close()


def test_an_upload_job_that_cannot_be_stored_leaves_no_folder(tmp_path):
    import shutil
    import sqlite3

    from vqa.serve.runner import UPLOADS, Service
    from vqa.serve.uploads import Upload

    class Refusing:
        def add(self, *_args):
            raise sqlite3.OperationalError("disk I/O error")

    service = Service.__new__(Service)  # only what adding a job needs: no engine
    service.data, service.db = str(tmp_path), Refusing()
    (tmp_path / UPLOADS).mkdir()
    folder = service.new_upload_folder("job-")
    open(os.path.join(folder, "000000.mp4"), "wb").close()
    with pytest.raises(sqlite3.OperationalError):
        service.add_upload_job(folder, [Upload(os.path.join(folder, "000000.mp4"), "a.mp4")])
    shutil.rmtree(folder, ignore_errors=True)  # what the request's own cleanup removes
    assert os.listdir(tmp_path / UPLOADS) == []


def test_a_file_named_twice_is_one_input_as_on_the_command_line(tree):
    from vqa.inputs import expand_inputs

    root, _outside = tree
    os.link(root / "day1" / "a.mp4", root / "hard.mp4")  # a name of its own, as on the command line
    named = ["day1/a.mp4", "day1/./a.mp4", "in.mp4", "hard.mp4", "day1", "hard.mp4"]
    served = [i.path for i in Roots([root]).resolve(named)]
    assert served == [i.path for i in expand_inputs([str(root / p) for p in named])]
    assert served == [str(root / "day1" / "a.mp4"), str(root / "hard.mp4"), str(root / "day1" / "zz_out.mp4")]


def test_a_job_names_each_file_once_and_no_more_than_the_limit(tree):
    from vqa.serve.paths import TooManyInputs

    root, _outside = tree
    once = Roots([root]).resolve(["."])
    many = Roots([root]).resolve(["."] * 50_000 + ["day1", "./day1/", str(root / "day1" / "a.mp4")])
    # day1/a.mp4, day1/zz_out.mp4, out.mp4; in.mp4 leads to day1/a.mp4, found first
    assert [i.path for i in many] == [i.path for i in once] and len(once) == 3
    assert len(Roots([root]).resolve(["."], limit=3)) == 3
    with pytest.raises(TooManyInputs, match="--max-inputs 2") as refused:
        Roots([root]).resolve(["."], limit=2)
    assert refused.value.code == "E_TOO_LARGE"
    with pytest.raises(PathRefused, match="not a path"):  # JSON may carry a lone surrogate
        Roots([root]).resolve(["\ud800.mp4"])


def test_a_body_that_stops_arriving_is_cut_off(tmp_path):
    import time

    from vqa.serve.uploads import SlowBody, paced

    async def stalls():
        yield b"x" * 1024
        await asyncio.sleep(60)
        yield b"never"

    async def read(chunks):
        return [chunk async for chunk in chunks]

    started = time.monotonic()
    with pytest.raises(SlowBody, match="1024 bytes"):
        asyncio.run(read(paced(stalls(), grace_s=0.2, min_rate=1024)))
    assert time.monotonic() - started < 5  # 0.2 s + 1024 bytes at 1024 bytes/s
    assert asyncio.run(read(paced(_chunks(b"abcdefgh", 3), grace_s=0.2, min_rate=0))) == [b"abc", b"def", b"gh"]


def test_the_bearer_scheme_is_case_insensitive():
    from vqa.serve.guard import _authorized

    for header in (b"Bearer t0k", b"bearer t0k", b"BEARER  t0k"):
        assert _authorized(header, b"t0k"), header
    for header in (b"", b"t0k", b"Bearer", b"Bearer t0kk", b"Basic t0k", b"Bearert0k"):
        assert not _authorized(header, b"t0k"), header
