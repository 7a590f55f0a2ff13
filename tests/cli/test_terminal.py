"""The command as a person or a scheduler meets it: a progress bar on a terminal, nothing of it
in a log, and SIGTERM stopping a job cleanly so that the next run resumes it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from tests.support.engine import stored, wait_until
from tests.support.terminal import on_a_terminal

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folder(make_clip, tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    for i in range(8):
        shutil.copy(make_clip("clean"), d / f"clip{i}.mp4")
    return d


def command(folder, out) -> list[str]:
    return [sys.executable, "-m", "vqa.cli", "score", str(folder), "--output", str(out), "--workers", "2"]


def test_progress_bar_on_a_terminal_summary_only_in_a_log(folder, tmp_path):
    returncode, text = on_a_terminal(command(folder, tmp_path / "a.jsonl"), env={**os.environ, "COLUMNS": "100"})
    assert returncode == 0, text
    assert "8/8" in text and "video/s" in text  # tqdm's count and rate
    assert "vqa: 8 videos: 8 ok" in text

    logged = subprocess.run(command(folder, tmp_path / "b.jsonl"), capture_output=True, timeout=120)
    assert logged.returncode == 0
    lines = logged.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vqa: 8 videos: 8 ok")  # no bar in a log


def test_sigterm_stops_cleanly_and_the_rerun_finishes(folder, tmp_path):
    out = tmp_path / "results.jsonl"
    proc = subprocess.Popen(command(folder, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Interrupted once the first record is stored: the others are still to come.
    assert wait_until(lambda: stored(out) or proc.poll() is not None, 120, poll_s=0.02)
    done_before = len(stored(out))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert 1 <= done_before < 8, done_before
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert b"Traceback" not in err
    assert len(stored(out)) < 8  # the re-run has work left to do
    again = subprocess.run(command(folder, out), capture_output=True, timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    names = [os.path.basename(json.loads(line)["path"]) for line in out.read_text().splitlines()]
    assert names == sorted(os.listdir(folder))
