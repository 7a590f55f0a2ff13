"""What a new user trips on first (issue 10's fixes): the Python snippets of the README and the docs pasted into
a script, a script without the main guard, the wheel's models, install hints, a decoder or a
worker memory limit that cannot work."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.docs_pages import page, user_pages
from tests.support.fakes import fail_backend_import
from click.testing import CliRunner

import vqa.decode
import vqa.infer
from vqa import BackendUnavailable, Scorer, UsageError, cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("newuser") / "clip.mp4"
    write_clip(path, textured_frames(12, 96, 128), fps=25)
    return path


def run_script(code: str, cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess:
    script = cwd / "script.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(REPO))  # this checkout's vqa, not an installed one
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def readme_snippets() -> list[str]:
    """The README's Python snippets, then those of the pages a user reads."""
    text = "\n".join(page(name) for name in ["README.md", *user_pages()])
    return [textwrap.dedent(m) for m in re.findall(r"```python\n(.*?)```", text, re.S)]


@pytest.mark.slow
@pytest.mark.parametrize("k", range(len(readme_snippets())))
def test_readme_python_snippets_run_as_scripts(k, clip, tmp_path):
    """Both snippets crashed when pasted into a script: no main guard, and `paths` undefined."""
    for name in ("clip.mp4", "other.mp4"):
        shutil.copy(clip, tmp_path / name)
    (tmp_path / "uploads").mkdir()
    shutil.copy(clip, tmp_path / "uploads" / "a.mp4")
    done = run_script(readme_snippets()[k], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_script_without_the_main_guard_is_told_so(clip, tmp_path):
    """The error blamed worker_memory_mb; the cause is the missing `if __name__ == "__main__":`."""
    done = run_script(f"import vqa\nprint(vqa.score({str(clip)!r}, workers=1, threads=1).status)\n", tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "UsageError" in last and '__name__ == "__main__"' in last, done.stderr[-3000:]
    assert "worker_memory_mb" not in last


def test_worker_memory_below_what_a_worker_needs_is_one_usage_error():
    """--worker-memory 512 was accepted, then every video failed with E_MEMORY_LIMIT."""
    with pytest.raises(UsageError, match=r"worker_memory_mb=512 is too low.*at least \d+ MiB"):
        Scorer(workers=1, threads=1, worker_memory_mb=512)


def test_cli_worker_memory_too_low_exits_2_once(clip):
    result = CliRunner().invoke(cli.cli, ["score", str(clip), "--workers", "1", "--worker-memory", "512"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("worker_memory_mb=512 is too low") == 1
    assert result.stdout == ""


def test_missing_decoder_is_an_error_when_the_scorer_is_built(monkeypatch):
    """It gave E_BACKEND on every video instead."""
    monkeypatch.setattr(vqa.decode, "AVAILABLE_BACKENDS",
                        {k: v for k, v in vqa.decode.AVAILABLE_BACKENDS.items() if k != "opencv"})
    with pytest.raises(BackendUnavailable, match="opencv-python-headless"):
        Scorer(decoder="opencv", workers=0)


def test_missing_torch_hint_names_the_cpu_build(monkeypatch):
    """`pip install torch` resolves to a multi-GB CUDA build."""
    fail_backend_import(monkeypatch, "vqa.infer.pytorch", "No module named 'torch'")
    with pytest.raises(BackendUnavailable) as info:
        Scorer(backend="pytorch", workers=0)
    pinned = re.search(r"^torch==(\S+)", (REPO / "requirements-test.txt").read_text(), re.M).group(1)
    assert f"torch=={pinned} --index-url https://download.pytorch.org/whl/cpu" in info.value.message
    assert f"torch=={pinned}" in " ".join(CliRunner().invoke(cli.cli, ["score", "--help"]).output.split())


@pytest.mark.slow
def test_the_wheel_ships_both_precisions(clip, tmp_path):
    """`pip install .` left out the INT8 model: --precision int8 gave E_MODEL_MISSING."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                             ".pytest_cache", "tests"))
    wheels = tmp_path / "wheels"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VQA_MODEL_DIR")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(src)], check=True, env=env, capture_output=True, timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # The dependencies come from this interpreter's site-packages, by path. Not through
    # --system-site-packages: made from a virtual environment's interpreter, that shows the
    # base interpreter's packages, not this one's (cv2 was missing). Paths listed in a .pth
    # are only added, their own .pth files (this checkout's editable install) are not run.
    outer = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    (site_packages / "outer_site_packages.pth").write_text("\n".join(outer) + "\n")
    (wheel,) = wheels.glob("vqa-*.whl")
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, env=env, capture_output=True, timeout=300)
    where = subprocess.run([venv / "bin" / "python", "-c", "import vqa; print(vqa.__file__)"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where
    for precision in ("fp32", "int8"):
        done = subprocess.run([venv / "bin" / "vqa", "score", str(clip), "--precision", precision, "--workers", "1",
                               "--format", "jsonl", "--quiet"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (precision, done.stderr[-2000:])
        record = json.loads(done.stdout)
        assert record["status"] == "ok" and record["config"]["precision"] == precision


def test_a_sparse_stretch_of_a_vfr_clip_is_not_truncation(tmp_path):
    """An intact variable-frame-rate clip got W_TRUNCATED: a run in a stretch of few frames
    found fewer than 4 before its stretch ended. Only a stream that ends early is truncated."""
    pts = [i * 0.04 for i in range(100)] + [4.0 + i * 0.5 for i in range(8)] + [8.0 + i * 0.04 for i in range(100)]
    path = tmp_path / "sparse_middle.mp4"
    write_clip(path, textured_frames(len(pts), 96, 128), fps=25, pts_s=pts)
    with Scorer(workers=0) as scorer:
        record = scorer.score(path)
    assert record.ok and record.frames["sampled"] < 32
    assert not [w for w in record.warnings if w.startswith("W_TRUNCATED")], record.warnings


def test_the_public_api_is_documented():
    """score(), score_many(), to_dict() and VideoScore's fields had no docstrings."""
    import vqa
    from vqa import VideoScore

    for obj in (vqa.score, Scorer.score, Scorer.score_many, Scorer.submit, Scorer.ascore, Scorer.close,
                VideoScore.to_dict, VideoScore.ok):
        assert (obj.__doc__ or "").strip(), obj
    fields = VideoScore.__dataclass_fields__
    missing = [n for n in fields if f"{n}:" not in VideoScore.__doc__]
    assert missing == []


def test_readme_says_how_long_the_suite_takes_and_how_to_run_the_quick_part():
    text = (REPO / "README.md").read_text()
    assert re.search(r"full suite takes about \d+ minutes", text)
    assert 'python -m pytest -q -m "not slow"' in text


def test_weights_are_hashed_once_per_file_identity(tmp_path, monkeypatch):
    """vqa.score hashed the weights on every call; now once per file identity per process,
    and a rewritten file is hashed (and refused) again."""
    import hashlib

    from vqa import model

    path = tmp_path / "w.bin"
    path.write_bytes(b"weights")
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(model.hashlib, "sha256", lambda data: calls.append(1) or real(data))
    first = model.file_sha256(path)
    assert model.file_sha256(path) == first and len(calls) == 1
    path.write_bytes(b"Weights")
    assert model.file_sha256(path) != first and len(calls) == 2


def test_one_version_source_and_the_package_is_typed():
    """The version was written twice (setup.cfg and vqa/__init__.py); now setup.cfg reads it."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["metadata"]["version"].strip() == "attr: vqa.__version__"
    assert re.fullmatch(r"\d+\.\d+\.\d+", vqa.__version__)
    assert "py.typed" in cfg["options.package_data"]["vqa"]
    assert (REPO / "vqa" / "py.typed").exists()
