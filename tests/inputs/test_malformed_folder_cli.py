"""The hostile upload folder through the real `vqa score` command, twice: one record per file
with its expected code, then a resumed run that scores nothing and writes the same output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tests.support.malformed_media import CASES, good_clip

pytestmark = pytest.mark.slow

DEADLINE_S = 300


@pytest.fixture(scope="module")
def uploads(tmp_path_factory):
    root = tmp_path_factory.mktemp("uploads")
    made = {}
    for name, (make, *_expected) in CASES.items():
        folder = root / name
        folder.mkdir()
        made[name] = os.fsdecode(make(folder))
    good_clip(root, "good.mp4")
    os.symlink("..", root / "grey" / "cycle")  # a directory symlink cycle: never followed
    outside = tmp_path_factory.mktemp("elsewhere")
    os.symlink(good_clip(outside, "secret.mp4"), root / "link_out.mp4")
    return root, made


def score(root, out):
    # --glob '*': every file gets a record, playlists and segment files included.
    return subprocess.run([sys.executable, "-m", "vqa.cli", "score", str(root), "--glob", "*",
                           "--output", str(out), "--workers", "2"],
                          capture_output=True, timeout=DEADLINE_S)


def test_hostile_folder_through_the_cli_then_resumed(uploads, tmp_path, validate_record):
    root, made = uploads
    out = tmp_path / "results.jsonl"
    first = score(root, out)
    assert first.returncode == 1, first.stderr.decode()  # some fail, none stops the job

    walked = sorted(os.path.join(d, f) for d, _, files in os.walk(os.fsencode(root)) for f in files)
    records = [validate_record(json.loads(line)) for line in out.read_bytes().decode().splitlines()]
    got = [os.fsencode(r["path"]) for r in records]
    assert got == walked  # exactly one record per file, in sorted order, odd names intact
    by_path = {r["path"]: r for r in records}
    for name, (_make, status, code, _warnings) in CASES.items():
        r = by_path[made[name]]
        assert (r["status"], (r["error"] or {}).get("code")) == (status, code), name
    assert by_path[str(root / "good.mp4")]["status"] == "ok"
    assert by_path[str(root / "link_out.mp4")]["error"]["code"] == "E_BAD_PATH"
    assert not any("/cycle/" in r["path"] for r in records)

    second = score(root, out)
    assert second.returncode == 1
    # Only what cannot be stat'ed (the symlink loop) has no identity to store, so it is checked
    # again; the link leading out is refused before scoring, every time.
    loops = [r for r in records if (r["error"] or {}).get("code") == "E_UNREADABLE"]
    assert len(loops) == 2
    assert f"{len(records) - 3} from the job store, 3 processed" in second.stderr.decode()
    assert [json.loads(line) for line in out.read_bytes().decode().splitlines()] == records
