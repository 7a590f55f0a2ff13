"""Start-up (issue 18): what the parent and a decode worker import, and a decoder package that
is missing or broken, found once when the Scorer is built (never E_INTERNAL per video)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.clips import textured_frames, write_clip

import vqa

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("av", "cv2", "openvino", "torch", "click")


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code``."""
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120,
                          check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_a_decode_worker_imports_neither_the_engines_nor_a_decoder_it_was_not_given():
    """A spawned worker imports vqa.engine.worker (and so vqa): it needs the decoders and
    vqa.preprocess, not the options, the pipeline and the engines behind them."""
    mods = imported_after("import vqa.engine.worker")
    assert not mods & {"vqa.config", "vqa.scorer.local", "vqa.engine.pool", "vqa.infer", "vqa.job", *HEAVY}


def test_the_parent_imports_no_decoder_before_it_spawns_the_workers():
    """Validating the options (the decoder's package included) imports neither PyAV nor OpenCV."""
    mods = imported_after("import vqa\nvqa.ScoreOptions().resolve()\nvqa.ScoreOptions(decoder='opencv').validate()")
    assert not mods & {"av", "cv2"}


def test_the_public_names_load_on_first_use():
    for name in vqa.__all__:
        assert getattr(vqa, name) is not None and name in dir(vqa)
    assert vqa.Scorer is vqa.scorer.local.Scorer and vqa.ScoreOptions is vqa.config.ScoreOptions
    with pytest.raises(AttributeError):
        vqa.not_a_name  # noqa: B018


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "clip.mp4"
    write_clip(path, textured_frames(12, 96, 128), fps=25)
    return path


def run_cli(args: list[str], site: Path) -> subprocess.CompletedProcess:
    """``python -m vqa.cli ARGS`` with ``site`` first on the path, in the workers too."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    return subprocess.run([sys.executable, "-m", "vqa.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def no_pyav(tmp_path) -> Path:
    """A folder whose sitecustomize hides PyAV: as if it were not installed."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['av'] = None\n")
    return tmp_path


@pytest.mark.parametrize("workers", ["0", "1"])
def test_opencv_decodes_without_pyav(clip, no_pyav, workers):
    """It gave E_INTERNAL on every video: the OpenCV reader imported PyAV for a check."""
    done = run_cli(["score", str(clip), "--decoder", "opencv", "--workers", workers, "--threads", "1",
                    "--quiet", "--format", "jsonl"], no_pyav)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout.splitlines()[0])
    assert record["status"] == "ok" and record["config"]["decoder"] == "opencv", record


def test_without_pyav_the_default_decoder_is_one_usage_error(clip, no_pyav):
    done = run_cli(["score", str(clip), "--workers", "1", "--threads", "1", "--quiet"], no_pyav)
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert done.stderr.count("E_BACKEND") == 1 and "pip install av" in done.stderr


def test_a_decoder_that_fails_to_import_in_the_worker_fails_the_build_once(clip, tmp_path):
    """Found (so the options pass) but broken: the worker says so when it starts, and the
    Scorer is not built, instead of E_BACKEND on every video."""
    (tmp_path / "av").mkdir()
    (tmp_path / "av" / "__init__.py").write_text("raise ImportError('libavformat.so.61: cannot open shared object')\n")
    for workers in ("1", "0"):
        done = run_cli(["score", str(clip), "--workers", workers, "--threads", "1", "--quiet"], tmp_path)
        assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
        assert done.stderr.count("E_BACKEND") == 1 and "libavformat.so.61" in done.stderr, done.stderr


def test_a_video_not_split_is_probed_and_decoded_in_one_task(clip, monkeypatch):
    """One task opens the file once (it was a probe task, then a decode task that opened it
    again); the record is the in-process engine's. Not frames.decoded: on this clip the two
    engines differ there by one frame, as they did before this change (9 against 10)."""
    from vqa import Scorer
    from vqa.engine.messages import ProbeDecodeTask
    from vqa.engine.processes import WorkerPool

    tasks = []
    real = WorkerPool.submit
    monkeypatch.setattr(WorkerPool, "submit", lambda pool, task: (tasks.append(task), real(pool, task)))
    with Scorer(workers=1, threads=1, frames=8) as pooled:
        record = pooled.score(clip).to_dict()
    assert [type(t) for t in tasks] == [ProbeDecodeTask]
    with Scorer(workers=0, threads=1, frames=8) as here:
        local = here.score(clip).to_dict()
    assert record["status"] == "ok" and record["frames"]["sampled"] == 8
    for r in (record, local):
        del r["frames"]["decoded"]
    assert record == local


CONSOLE_SCRIPT = """import re
import sys
from vqa.cli import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\\\.pyw|\\\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def test_the_installed_command_is_not_run_again_in_each_worker(clip, tmp_path):
    """The ``vqa`` command pip installs is a script file; spawn ran it again in every decode
    worker (importing click and every command) until ``vqa.cli.main`` took its file name away.
    Every process reports its imports on stderr (PYTHONPROFILEIMPORTTIME): click once, the parent's."""
    script = tmp_path / "vqa"
    script.write_text(CONSOLE_SCRIPT)  # what pip writes for `vqa = vqa.cli:main`, less the #! line
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONPROFILEIMPORTTIME="1")
    done = subprocess.run([sys.executable, str(script), "score", str(clip), "--workers", "2", "--threads", "1",
                           "--quiet", "--format", "jsonl"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[0])["status"] == "ok"
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert imported.count("vqa.engine.worker") == 3  # the parent and both workers reported theirs
    assert imported.count("click") == 1 and imported.count("vqa.cli") == 1
    # The first worker was started before the command imported click (vqa.engine.prestart),
    # and the pool took it: a worker started for nothing would have reported a fourth
    # vqa.engine.worker above (it imports it before it waits for its settings).
    assert imported.index("vqa.engine.prestart") < imported.index("click")


@pytest.mark.parametrize("words, starts", [
    (["score", "a.mp4"], True),
    (["score", "--workers", "2", "a.mp4", "--frames", "all"], True),
    (["score", "--workers", "0", "a.mp4"], False),
    (["score", "--workers=0", "a.mp4"], False),
    (["score", "--engine", "ray", "a.mp4"], False),
    (["score", "--help"], False),
    (["score", "--", "--help"], True),  # a file named --help
    (["report", "scores.jsonl"], False),
    (["bench", "a.mp4"], False),
    ([], False),
])
def test_vqa_score_starts_a_worker_before_it_imports_its_options(words, starts):
    from vqa.cli import _starts_a_worker

    assert _starts_a_worker(words) is starts


def test_a_worker_started_for_nothing_is_stopped_and_one_is_taken_once():
    import multiprocessing as mp

    from vqa.engine import prestart

    from vqa.engine.worker import WORKER_NAME

    assert prestart.WORKER_NAME == WORKER_NAME
    prestart.start()
    process = prestart._waiting[0]
    assert process.is_alive()
    assert prestart.take(mp.get_context("fork")) is None  # not a worker of another start method
    prestart.discard()
    assert not process.is_alive() and prestart._waiting is None
    assert prestart.take(mp.get_context("spawn")) is None


def test_a_job_with_nothing_to_score_stops_the_worker_it_started(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run([sys.executable, "-m", "vqa.cli", "score", str(empty), "--quiet", "--format", "jsonl"],
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""


@pytest.mark.slow
def test_the_command_and_its_workers_exit_without_teardown(clip, tmp_path):
    """Decode workers end with os._exit once stopped, and ``vqa`` after its atexit hooks
    (issue 18: tearing the interpreter down took 0.1 to 0.2 s each). Every process here
    registers an atexit hook that leaves a file named by its pid: the parent's runs, no
    worker's does; records and exit statuses are as before."""
    from vqa.engine.worker import WORKER_NAME

    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    marks.mkdir()
    (site / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "def mark():\n"
        "    mp = sys.modules.get('multiprocessing')\n"
        "    with open(os.path.join(os.environ['VQA_TEST_MARKS'], str(os.getpid())), 'w') as f:\n"
        "        f.write(mp.current_process().name if mp else '')\n"
        "atexit.register(mark)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), VQA_TEST_MARKS=str(marks))
    for target, status, code in ((clip, "ok", 0), (tmp_path / "missing.mp4", "error", 1)):
        with subprocess.Popen([sys.executable, "-m", "vqa.cli", "score", str(target), "--workers", "2", "--threads",
                               "1", "--quiet", "--format", "jsonl"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as proc:
            out, err = proc.communicate(timeout=300)
        assert proc.returncode == code, err[-2000:]
        assert json.loads(out.splitlines()[0])["status"] == status
        names = {p.name: p.read_text() for p in marks.iterdir()}
        # The parent's hook ran, no worker's did (multiprocessing's resource tracker may leave one).
        assert str(proc.pid) in names and WORKER_NAME not in names.values(), names
        for p in marks.iterdir():
            p.unlink()


def test_openvino_is_imported_without_its_conversion_api_and_telemetry():
    """``import openvino`` loads its model converter, whose telemetry forks a process and starts
    a thread: half of OpenVINO's import time (issue 18). The scorer loads IR only, so it
    imports OpenVINO without it; ``openvino.convert_model`` still works for a script."""
    mods = imported_after("import vqa.infer.openvino")
    assert "openvino" in mods and not {m for m in mods if m.startswith(("openvino.tools", "openvino_telemetry"))}
    mods = imported_after("import vqa.infer.openvino, openvino\nassert callable(openvino.convert_model)")
    assert "openvino.tools.ovc" in mods
