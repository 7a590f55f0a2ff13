"""--engine ray: the folder job on a Ray cluster, against the local engine, through faults.

One two-node cluster on this host (``ray.cluster_utils.Cluster``, 1 CPU a node) for the
module: each node gets one actor holding a Scorer of 1 decode worker and 1 inference thread,
the same as the local Scorer these records are held to.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from tests.support.required import optional_module
from tests.support.engine import stored
from click.testing import CliRunner
from tests.support.clips import textured_frames, write_clip
from tests.support.malformed_media import CASES

import vqa
import vqa.cli
from vqa.errors import BackendUnavailable
from vqa.inputs import expand_inputs
from vqa.job import run_job

REPO = os.path.dirname(os.path.dirname(os.path.abspath(vqa.__file__)))
HOSTILE = ("zero_bytes", "random_bytes", "truncated_with_index", "audio_only", "huge_resolution",
           "rotated", "fifo", "symlink_loop", "non_utf8_name")


def test_ray_absent_is_a_usage_error_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"x")
    result = CliRunner().invoke(vqa.cli.cli, ["score", str(clip), "--engine", "ray"])
    assert result.exit_code == 2, result.output
    assert "pip install '.[ray]'" in result.output and "E_BACKEND" in result.output
    with pytest.raises(BackendUnavailable, match=r"pip install '\.\[ray\]'"):
        vqa.open_scorer(engine="ray")
    result = CliRunner().invoke(vqa.cli.cli, ["score", str(clip), "--actors-per-node", "2"])
    assert result.exit_code == 2 and "--engine ray" in result.output


def test_ray_is_not_imported_unless_asked_for():
    code = ("import sys, vqa, vqa.cli, vqa.job, vqa.scorer.ray; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=REPO))


def test_a_path_only_the_driver_reads_names_the_node(tmp_path):
    from types import SimpleNamespace

    from vqa.scorer.ray import RayScorer
    from vqa.types import VideoScore

    here = tmp_path / "a.mp4"
    here.write_bytes(b"x")
    actor = SimpleNamespace(info={"node": "node7 (10.0.0.7)"})
    for path, named in ((str(here), True), (str(tmp_path / "gone.mp4"), False)):
        record = VideoScore(path=path, status="error", error={"code": "E_NOT_FOUND", "message": "no such file"})
        message = RayScorer._name_node(None, record, actor).error["message"]
        assert ("on node node7 (10.0.0.7)" in message) is named, message


# --- on a cluster --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    ray = optional_module("ray", "the [ray] extra")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, runtime_env={"env_vars": {"PYTHONPATH": REPO}},
             log_to_driver=False, include_dashboard=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Twelve small clips of different content, and a few hostile files."""
    root = tmp_path_factory.mktemp("uploads")
    for i in range(12):
        write_clip(root / f"clip{i:02d}.mp4", textured_frames(25, 96, 160, seed=i))
    return root


def job(scorer, root, on_outcome=lambda n: None):
    records = []
    for outcome in run_job(scorer, expand_inputs([str(root)])):
        records.append(outcome.record)
        on_outcome(len(records))
    return records


def ray_scorer(**options):
    from vqa.scorer.ray import RayScorer
    return RayScorer(**options)


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_driver_leaves_the_cores_to_the_nodes(cluster):
    """--workers 20 is a plan for big nodes: this driver (1 CPU a node here) must not refuse it
    with its own core count; each actor resolves it on its node (here, one said to have 64)."""
    from vqa.scorer.ray import RayScorer

    class BigNode:  # a local class: Ray sends it by value, so the nodes need not import this file
        def __init__(self, options, cores, cwd=None):
            from vqa.infer import model_files
            from vqa.model import load_model_spec

            self.resolved = options.resolve(cores=64)  # what NodeScorer's Scorer(options, cores=64) plans
            self.model = load_model_spec(options.model_dir).record(model_files(options.backend, options.precision))

        def describe(self):
            return {"node": "big", "pid": os.getpid(), "cwd": None, "workers": self.resolved.workers,
                    "threads": self.resolved.threads, "model": self.model,
                    "config": self.resolved.record_config(), "vqa": vqa.__file__}

        def ping(self):
            return time.time()

        def close(self):
            pass

    options = vqa.ScoreOptions(workers=20)
    with pytest.raises(vqa.UsageError, match="limit of"):
        options.resolve(cores=2)  # the driver's own plan would refuse it
    with RayScorer(options, node_class=BigNode) as remote:
        assert remote.config == options.record_config() == vqa.ScoreOptions(workers=1).record_config()
        assert {a["workers"] for a in remote.actors()} == {20}


@pytest.mark.slow
def test_records_identical_to_the_local_engine(cluster, folder, tmp_path):
    from vqa import Scorer

    root = tmp_path / "mixed"
    root.mkdir()
    for name in sorted(os.listdir(folder))[:4]:
        shutil.copy(folder / name, root / name)
    for case in HOSTILE:
        CASES[case][0](root)
    with Scorer(workers=1, threads=1) as local:
        expected = job(local, root)
    with ray_scorer() as remote:
        assert len(remote.actors()) >= 1 and all(a["workers"] == 1 and a["threads"] == 1 for a in remote.actors())
        got = job(remote, root)
    assert len(got) == 4 + len(HOSTILE)
    assert got == expected
    assert {r["error"]["code"] for r in got if r["error"]} >= {"E_EMPTY", "E_NOT_VIDEO", "E_BAD_PATH"}


@pytest.mark.slow
def test_relative_paths_mean_what_they_mean_to_the_driver(cluster, folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    with ray_scorer() as remote:
        assert {a["cwd"] for a in remote.actors()} == {str(folder.parent)}
        records = job(remote, folder.name)
    assert [r["path"] for r in records] == [os.path.join(folder.name, n) for n in sorted(os.listdir(folder))]
    assert all(r["status"] == "ok" for r in records)


@pytest.mark.slow
def test_an_actor_killed_mid_job_costs_nothing(cluster, folder):
    with ray_scorer() as remote:
        wait_for(lambda: len(remote.actors()) == 2)
        victim = remote.actors()[0]["pid"]
        records = job(remote, folder, lambda n: n == 2 and os.kill(victim, signal.SIGKILL))
        # Replaced, since its node is alive (found dead by its videos, or by the next ping).
        wait_for(lambda: len(remote.actors()) == 2 and victim not in {a["pid"] for a in remote.actors()})
    assert [os.path.basename(r["path"]) for r in records] == sorted(os.listdir(folder))
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records if r["error"]]


@pytest.mark.slow
def test_an_actor_that_stops_answering_is_killed_and_replaced(cluster, folder):
    with ray_scorer(hang_s=3.0) as remote:
        wait_for(lambda: len(remote.actors()) == 2)
        victim = remote.actors()[0]["pid"]
        records = job(remote, folder, lambda n: n == 2 and os.kill(victim, signal.SIGSTOP))
        wait_for(lambda: victim not in {a["pid"] for a in remote.actors()})
    assert [os.path.basename(r["path"]) for r in records] == sorted(os.listdir(folder))
    assert all(r["status"] == "ok" for r in records)


@pytest.mark.slow
def test_a_node_removed_mid_job_costs_nothing(cluster, folder):
    worker_node = cluster.worker_nodes and next(iter(cluster.worker_nodes))
    with ray_scorer() as remote:
        wait_for(lambda: len(remote.actors()) == 2)
        records = job(remote, folder, lambda n: n == 2 and cluster.remove_node(worker_node))
        wait_for(lambda: len({a["node_id"] for a in remote.actors()}) == 1)
    cluster.add_node(num_cpus=1)  # for any test after this one
    cluster.wait_for_nodes()
    assert [os.path.basename(r["path"]) for r in records] == sorted(os.listdir(folder))
    assert all(r["status"] == "ok" for r in records)



@pytest.mark.slow
def test_driver_killed_then_rerun_every_video_once(cluster, folder, tmp_path):
    out = tmp_path / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=REPO, RAY_ADDRESS=cluster.address)
    command = [sys.executable, "-m", "vqa.cli", "score", str(folder), "--output", str(out), "--engine", "ray"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(lambda: len(stored(out)) >= 3 or proc.poll() is not None, timeout=120)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = stored(out)
    assert 0 < len(before) < 12, "the kill did not land mid-job"
    done = subprocess.run(command, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    names = [os.path.basename(json.loads(line)["path"]) for line in out.read_text().splitlines()]
    assert names == sorted(os.listdir(folder))
    after = stored(out)
    assert len(after) == 12 and all(after[p] == t for p, t in before.items())  # none scored twice
    assert f"{len(before)} from the job store" in done.stderr.decode()


@pytest.mark.slow
def test_a_ray_run_prints_only_its_summary_and_a_rate_over_the_whole_command(folder, tmp_path):
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VQA_DEBUG")}
    env["PYTHONPATH"] = REPO
    # Its own temp folder: otherwise ray.init joins the module's test cluster, whatever its state.
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="vqa-ray-")
    clip = str(folder / "clip00.mp4")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vqa.cli", "score", clip, "--engine", "ray", "--workers", "1"],
                          env=env, capture_output=True, text=True, timeout=300)
    wall_s = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vqa: 1 video: 1 ok"), proc.stderr  # no Ray warnings
    seconds = float(lines[0].split(" processed in ")[1].split(" s")[0])
    assert seconds >= 0.5 * wall_s  # the command's time, Ray's start-up included


def test_an_address_where_nothing_answers_is_a_usage_error_at_once(tmp_path):
    # RAY_ADDRESS=127.0.0.1:1 made ray.init retry for minutes, printing Ray's own lines. In a
    # fresh process: this one may hold the module's cluster, which a RayScorer would join.
    pytest.importorskip("ray")
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"x")
    env = dict(os.environ, PYTHONPATH=REPO, RAY_ADDRESS="127.0.0.1:1")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "vqa.cli", "score", str(clip), "--engine", "ray"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "nothing answers at 127.0.0.1:1" in done.stderr, done.stderr
    assert time.monotonic() - start < 60


HOST_AND_EXIT = """
import logging, os, signal, sys
import vqa
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(a[0]))
logging.getLogger("ray").setLevel(logging.INFO)
with vqa.open_scorer(engine="ray", workers=1) as s:
    assert s.score(sys.argv[1]).status == "ok"
logger = logging.getLogger("ray")
os.kill(os.getpid(), signal.SIGTERM)
print("host:", got == [signal.SIGTERM], logger.level == logging.INFO, logger.propagate, logger.handlers == [])
s = vqa.open_scorer(engine="ray", workers=1)  # left open: the exit hooks must close it
assert s.score(sys.argv[1]).status == "ok"
pid = s.actors()[0]["pid"]
print("ring:", " ".join(sorted({l.split()[-1] for l in open(f"/proc/{pid}/maps") if "/dev/shm/" in l})))
"""


@pytest.mark.slow
def test_the_host_gets_its_handlers_back_and_an_open_scorer_frees_its_ring_at_exit(folder):
    # The SIGTERM handler and the "ray" logger stayed Ray's after close(), and a RayScorer
    # still open at exit left its actor's shared-memory ring in /dev/shm.
    pytest.importorskip("ray")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VQA_DEBUG")}
    env["PYTHONPATH"], env["RAY_TMPDIR"] = REPO, tempfile.mkdtemp(prefix="vqa-ray-")
    proc = subprocess.run([sys.executable, "-c", HOST_AND_EXIT, str(folder / "clip00.mp4")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["host"] == "True True True True", proc.stdout
    rings = lines["ring"].split()
    assert rings and not any(os.path.exists(r) for r in rings), rings
