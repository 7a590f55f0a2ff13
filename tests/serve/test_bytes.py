"""``Scorer.submit(data, name=...)``: a video given as bytes or a binary file object, not a
path, is spooled privately and scored exactly as its file would be; the service's uploads are
received by the same rule (vqa.files.create_private, shown_as)."""
from __future__ import annotations

import io
import os
import tempfile

import pytest
from tests.support.malformed_media import good_clip

from vqa import Scorer


@pytest.fixture(scope="module")
def scorer():
    with Scorer(workers=0, threads=1) as s:
        yield s


def spool_folders() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("vqa-spool-")}


def test_bytes_and_a_file_object_score_as_their_file_does(scorer, tmp_path):
    clip = good_clip(tmp_path, "clip.mp4", seed=2)
    data = open(clip, "rb").read()
    before = spool_folders()
    by_path = scorer.submit(clip).result()
    by_bytes = scorer.submit(data, name="camera/one.mp4").result()
    with open(clip, "rb") as f:
        by_file = scorer.submit(f, name="two.mp4").result()
    by_view = scorer.submit(memoryview(data), name="three.mp4").result()
    assert by_path.status == by_bytes.status == by_file.status == by_view.status == "ok"
    assert by_bytes.score == by_path.score == by_file.score == by_view.score
    assert (by_bytes.path, by_file.path, by_view.path) == ("camera/one.mp4", "two.mp4", "three.mp4")  # as given
    assert spool_folders() == before  # each spooled copy is gone once scored


def test_bad_content_gets_its_record_under_its_name_and_no_spool_path(scorer):
    record = scorer.submit(b"not a video at all" * 10, name="junk.mp4").result()
    assert record.status == "error" and record.error["code"] == "E_NOT_VIDEO" and record.path == "junk.mp4"
    assert "vqa-spool-" not in record.error["message"], record.error
    empty = scorer.submit(b"", name="empty.mp4").result()
    assert empty.error["code"] == "E_EMPTY" and "vqa-spool-" not in empty.error["message"]


def test_without_a_name_bytes_are_still_a_path_and_a_text_file_is_refused(scorer):
    assert scorer.submit(b"/no/such/file.mp4").result().error["code"] == "E_NOT_FOUND"
    with pytest.raises(TypeError, match="binary"):
        scorer.submit(io.StringIO("text"), name="t.mp4")
    with pytest.raises(TypeError, match="bytes or a binary file object"):
        scorer.submit(12345, name="n.mp4")
