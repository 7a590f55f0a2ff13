"""Untrusted paths (issue 9): files swapped between the walk and the open, trees deeper than
PATH_MAX, folders that cannot be read. Files whose streams lie are in test_lying_streams.py.

Through the real `vqa score` command, and the mechanisms underneath on their own."""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from tests.inputs.test_lying_streams import records_of, score_cli
from tests.support.malformed_media import good_clip

import vqa.job
from vqa import cli
from vqa.errors import InputError
from vqa.files import FoundPath, open_input
from vqa.inputs import expand_inputs, walk_videos


# --- item 5: where a file leads is checked when it is opened ----------------------------------

@pytest.fixture
def swap_tree(tmp_path):
    root = tmp_path / "uploads"
    (root / "sub").mkdir(parents=True)
    good_clip(root, "a.mp4")
    good_clip(root / "sub", "b.mp4", seed=1)
    outside = tmp_path / "secret"
    outside.mkdir()
    good_clip(outside, "a.mp4", seed=2)
    good_clip(outside, "b.mp4", seed=3)
    return root, outside


def _swap(root, outside):
    """What an uploader does between the walk and the open: a file and a folder become links."""
    os.unlink(root / "a.mp4")
    os.symlink(outside / "a.mp4", root / "a.mp4")
    os.rename(root / "sub", root / "sub_old")
    os.symlink(outside, root / "sub", target_is_directory=True)


def test_a_file_or_folder_swapped_for_a_link_after_the_walk_is_refused_at_open(swap_tree):
    root, outside = swap_tree
    found = [i.path for i in expand_inputs([str(root)])]
    assert all(isinstance(p, FoundPath) for p in found)
    _swap(root, outside)
    for p in found:
        with pytest.raises(InputError) as err:
            open_input(p)
        assert err.value.code == "E_BAD_PATH" and "outside" in err.value.message
    open_input(str(root / "a.mp4"))  # named by the user, not found by walking: followed


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_swap_between_walk_and_open_through_the_cli(swap_tree, monkeypatch, tmp_path, workers):
    root, outside = swap_tree
    real_expand = vqa.job.expand_inputs  # the folder job expands the paths (vqa.job.FolderJob)

    def expand_then_swap(*args, **kwargs):
        inputs = real_expand(*args, **kwargs)
        _swap(root, outside)
        return inputs

    monkeypatch.setattr(vqa.job, "expand_inputs", expand_then_swap)
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(cli.cli, ["score", str(root), "--output", str(out), "--workers", str(workers)])
    assert result.exit_code == 1, result.output
    records = records_of(out)
    assert [os.path.relpath(r["path"], root) for r in records] == ["a.mp4", "sub/b.mp4"]
    assert [r["error"]["code"] for r in records] == ["E_BAD_PATH", "E_BAD_PATH"]


# --- item 6: trees deeper than PATH_MAX -------------------------------------------------------

def _deep_tree(root, levels: int, clip: bytes) -> None:
    """``levels`` folders of 9-byte names, a clip at the bottom: its path passes PATH_MAX
    (4096), so the tree is made through folder descriptors."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("deepfolder"[:9], dir_fd=fd)
            child = os.open("deepfolde", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("deep.mp4", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, clip)
        os.close(out)
    finally:
        os.close(fd)


@pytest.fixture
def deep(tmp_path):
    root = tmp_path / "deep"
    root.mkdir()
    clip = open(good_clip(tmp_path, "top.mp4"), "rb").read()
    (root / "top.mp4").write_bytes(clip)
    _deep_tree(root, 500, clip)
    return root


def test_the_walk_reaches_past_path_max(deep):
    found = walk_videos(str(deep))
    assert len(found) == 2 and len(os.fsencode(found[0])) > 4096
    with pytest.raises(InputError) as err:
        open_input(found[0])
    assert err.value.code == "E_BAD_PATH" and "PATH_MAX" in err.value.message


@pytest.mark.slow
def test_every_clip_of_a_deep_tree_gets_a_record_and_the_status_says_so(deep, tmp_path):
    out = tmp_path / "r.jsonl"
    proc = score_cli(deep, "--output", out, "--workers", "1")
    assert proc.returncode == 1, proc.stderr.decode()
    records = records_of(out)
    assert [r["status"] for r in records] == ["error", "ok"]  # sorted: deepfolde/... < top.mp4
    assert records[0]["error"]["code"] == "E_BAD_PATH" and records[0]["path"].endswith("/deep.mp4")
    assert "2 videos: 1 ok, 1 failed" in proc.stderr.decode()


def test_an_unreadable_subfolder_gets_a_record(tmp_path, monkeypatch):
    root = tmp_path / "t"
    (root / "locked").mkdir(parents=True)
    good_clip(root, "a.mp4")
    real_scandir = os.scandir

    def scandir(target):  # root reads every folder: refuse one as another user would see it
        if isinstance(target, int) and os.readlink(f"/proc/self/fd/{target}").endswith("/locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(target)

    monkeypatch.setattr(os, "scandir", scandir)
    got = expand_inputs([str(root)])
    assert [(os.path.basename(i.path), i.error and i.error[0]) for i in got] == [
        ("a.mp4", None), ("locked", "E_UNREADABLE")]
