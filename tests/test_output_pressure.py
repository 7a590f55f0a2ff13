"""Fifth round (outputs): what the product writes under pressure. Nothing lost, nothing
duplicated, a clear error and exit status: the output's folder removed mid-run, a reader that
goes away, a damaged job store."""
from __future__ import annotations

import json
import shutil

from click.testing import CliRunner
from fakes import FakeScorer, touch

from vqa import cli


def invoke(*args):
    return CliRunner().invoke(cli.cli, [*map(str, args)])


def make_folder(tmp_path, n=6):
    d = tmp_path / "in"
    for k in range(n):
        touch(d / f"clip{k}.mp4").write_bytes(b"x" * (k + 1))
    return d


def paths_in(path) -> list[str]:
    return [json.loads(line)["path"] for line in path.read_text().splitlines()]


class RemovesTheOutputFolder(FakeScorer):
    """Removes the output's folder (``rm -rf``) while the third video is scored."""

    folder = None

    def submit(self, p, split=False):
        if len(self.seen) == 2:
            shutil.rmtree(self.folder)
        return super().submit(p)


def test_the_output_folder_removed_mid_run_is_e_output_exit_3_and_resume_completes(monkeypatch, tmp_path):
    folder = make_folder(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out, db = out_dir / "r.jsonl", tmp_path / "j.db"
    RemovesTheOutputFolder.folder = out_dir
    monkeypatch.setattr(cli.score, "_make_scorer", RemovesTheOutputFolder)
    first = invoke("score", folder, "--output", out, "--db", db)
    # Before: a FileNotFoundError traceback from the rename, after a summary saying all went well.
    assert first.exit_code == 3, first.output
    assert "E_OUTPUT" in first.stderr and "re-run to resume" in first.stderr
    assert first.exception is None or isinstance(first.exception, SystemExit)
    out_dir.mkdir()
    FakeScorer.instances = []
    monkeypatch.setattr(cli.score, "_make_scorer", FakeScorer)
    again = invoke("score", folder, "--output", out, "--db", db)
    assert again.exit_code == 0, again.output
    assert sorted(paths_in(out)) == sorted(str(p) for p in folder.iterdir())  # each once
    assert "6 from the job store" in again.stderr  # none scored twice
