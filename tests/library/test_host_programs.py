"""The fifth attack: vqa inside host programs that set things up their own way. A host that turns
warnings into errors still gets a dropped Scorer released; a host with no home folder, or a
compiled-model cache it cannot use, still gets a Scorer."""
from __future__ import annotations

import gc
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.engine import mapped_segments, private_mounts, wait_until

from vqa import Scorer
from vqa.job import run_job

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 30  # a few tiny clips; past this it is a hang


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("embedding") / "c.mp4"
    write_clip(path, textured_frames(12, 96, 128), fps=25)
    return str(path)


def _engine_threads() -> int:
    return sum(t.name in ("vqa-dispatch", "vqa-engine", "vqa-close") for t in threading.enumerate())


@pytest.mark.parametrize("workers", [0, 1])
def test_a_dropped_scorer_is_released_when_warnings_are_errors(clip, workers, monkeypatch):
    # `python -W error` (or pytest's filterwarnings=error): the ResourceWarning was raised inside
    # __del__, swallowed there, and close() never ran: the worker, the ring, the thread and 8
    # descriptors stayed for the life of the process, and nothing was said.
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    gc.collect()
    before_children = {p.pid for p in multiprocessing.active_children()}
    before_rings, before_threads = mapped_segments(os.getpid()), _engine_threads()
    before_fds = len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        scorer = Scorer(workers=workers, threads=1, frames=8)
        assert scorer.score(clip).status == "ok"
        del scorer  # never closed
        gc.collect()
    assert wait_until(lambda: _engine_threads() == before_threads, 10)
    assert {p.pid for p in multiprocessing.active_children()} <= before_children  # the worker is gone
    assert mapped_segments(os.getpid()) <= before_rings
    assert len(os.listdir("/proc/self/fd")) <= before_fds + 2
    # and the warning, an error here, is reported as an unclosed file's is ("Exception ignored in")
    assert [type(e) for e in reported] == [ResourceWarning], reported
    assert "unclosed Scorer" in str(reported[0])


# --- where the compiled model is cached ----------------------------------------------------

def test_no_home_folder_means_no_cache_not_an_error(clip, monkeypatch):
    # A container's arbitrary uid with HOME unset has no home in the password database either:
    # Path.home() raised RuntimeError("Could not determine home directory.") out of Scorer().
    import pwd

    for name in ("HOME", "XDG_CACHE_HOME", "VQA_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    with Scorer(workers=0, threads=1, frames=8) as scorer:
        assert scorer.score(clip).status == "ok"


READ_ONLY_CACHE = textwrap.dedent("""
    import sys
    from vqa import Scorer

    with Scorer(workers=0, threads=1, frames=8) as scorer:
        print(scorer.score(sys.argv[1]).status)
""")


def test_a_cache_that_cannot_be_used_is_passed_by(clip, tmp_path):
    # A cache OpenVINO can neither read nor clean: a blob cut short on a read-only volume here;
    # the same as a blob another user wrote (an image warmed as root, run as a service user).
    # Scorer() raised OpenVINO's RuntimeError ("filesystem error: cannot remove: Read-only file
    # system"); now the model is compiled without the cache.
    prefix = private_mounts()
    if prefix is None:
        pytest.skip("cannot bind-mount here (needs root or unprivileged user namespaces)")
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": ROOT, "VQA_CACHE_DIR": str(cache)}
    script = tmp_path / "ro.py"
    script.write_text(READ_ONLY_CACHE)
    warm = subprocess.run([sys.executable, str(script), clip], capture_output=True, text=True, env=env,
                          timeout=DEADLINE_S)
    assert warm.stdout.split() == ["ok"], warm.stderr
    blobs = list(cache.rglob("*.blob"))
    assert blobs, "OpenVINO wrote no compiled model to the cache"
    for blob in blobs:
        blob.chmod(0o644)
        os.truncate(blob, 1000)
    read_only = f"mount --bind {cache} {cache} && mount -o remount,bind,ro {cache} {cache} && "
    done = subprocess.run([*prefix, "sh", "-c", read_only + f"{sys.executable} {script} {clip}"],
                          capture_output=True, text=True, env=env, timeout=DEADLINE_S)
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr[-2000:]


# --- a host started with its standard descriptors closed -----------------------------------

CLOSED_STD = textwrap.dedent("""
    import json, os, sys, time
    from vqa import Scorer

    def where(pid, fd):
        try:
            return os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            return None

    if __name__ == "__main__":
        clip, report = sys.argv[1], sys.argv[2]
        with Scorer(workers=1, threads=1, frames="all") as scorer:
            alone = scorer.score(clip).score
            future = scorer.submit(clip)
            time.sleep(0.05)
            os.write(2, b"a warning from the host or a tool it runs\\n" * 30000)  # its first 1.3 MB of stderr
            noisy = future.result().score
            worker = scorer._pool.pids[0]
            got = {"alone": alone, "noisy": noisy, "fds": [where(os.getpid(), fd) for fd in (0, 1, 2)],
                   "worker_fds": [where(worker, fd) for fd in (0, 1, 2)]}
        with open(report, "w") as f:
            json.dump(got, f)
""")


@pytest.mark.slow
def test_closed_standard_descriptors_never_become_the_ring(tmp_path):
    # `python host.py <&- >&- 2>&-` (a daemon, a cron line): the ring's shared memory was opened
    # at descriptors 1 and 2, in the host and in its workers, so the first bytes anything wrote to
    # "stderr" landed in the frames being scored (a 1.3 MB write moved a score from 8.5 to 9.8).
    clip = tmp_path / "long.mp4"
    write_clip(clip, textured_frames(120, 240, 320, seed=7), fps=25)
    script, report = tmp_path / "closed.py", tmp_path / "report.json"
    script.write_text(CLOSED_STD)
    done = subprocess.run(["sh", "-c", 'exec "$0" "$@" <&- >&- 2>&-', sys.executable, str(script), str(clip),
                           str(report)], env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2)
    assert done.returncode == 0 and report.exists(), done
    got = json.loads(report.read_text())
    assert got["fds"] == [os.devnull] * 3 and got["worker_fds"] == [os.devnull] * 3, got
    assert got["noisy"] == got["alone"], got


@pytest.mark.parametrize("closed", ["2>&-", ">&-", "<&- >&- 2>&-"])
def test_the_command_with_closed_standard_streams(clip, tmp_path, closed):
    # `vqa score ... -o FILE 2>&-` stopped on sys.stderr being None before scoring (exit 1, no
    # output); `>&-` wrote every record, then stopped on sys.stdout at the exit (exit 1).
    out = tmp_path / "r.jsonl"
    command = f'exec "$0" -m vqa.cli score "$1" --workers 1 --frames 8 --format jsonl -o "$2" {closed}'
    done = subprocess.run(["sh", "-c", command, sys.executable, clip, str(out)], capture_output=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2)
    assert done.returncode == 0, done
    assert [json.loads(line)["status"] for line in out.read_text().splitlines()] == ["ok"]


# --- stopping a stream ---------------------------------------------------------------------

class _Stop(Exception):
    pass


@pytest.mark.parametrize("stream", ["score_many", "run_job"])
def test_an_exception_while_a_stream_waits_cancels_the_video_it_waits_for(clip, tmp_path, stream, monkeypatch):
    # Ctrl-C (here: a signal handler raising) while score_many or run_job waited for a record:
    # that video had left the queue of futures they cancel, so it ran to its end (3.1 s more of the
    # only worker for a 600-frame clip; the next score() waited behind it).
    import signal

    from vqa.engine.pool import PoolEngine

    big = tmp_path / "big.mp4"
    write_clip(big, textured_frames(600, 240, 320, seed=9), fps=25)
    # The signal comes when the engine has planned the big video, so it is in a worker's hands;
    # not after a time, which a fast machine spent scoring all of it (CI's did, within 0.3 s).
    plan = PoolEngine._plan

    def planned(engine, video, *args, **kwargs):
        plan(engine, video, *args, **kwargs)
        if video.path == str(big):
            os.kill(os.getpid(), signal.SIGALRM)

    monkeypatch.setattr(PoolEngine, "_plan", planned)
    with Scorer(workers=1, threads=1, frames="all") as scorer:
        futures = []
        submit = scorer.submit
        scorer.submit = lambda *a, **k: futures.append(submit(*a, **k)) or futures[-1]  # type: ignore[method-assign]

        def stop(*_):
            raise _Stop

        previous = signal.signal(signal.SIGALRM, stop)
        try:
            with pytest.raises(_Stop):
                paths = [str(big), clip]
                for _ in scorer.score_many(paths) if stream == "score_many" else run_job(scorer, paths):
                    pass
        finally:
            signal.signal(signal.SIGALRM, previous)
        assert len(futures) == 2 and all(f.cancelled() for f in futures), futures
        del scorer.submit
        assert scorer.score(clip).status == "ok"


# --- relative paths --------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 1])
def test_a_relative_path_is_the_callers_current_folders(tmp_path, monkeypatch, workers):
    # Decode workers keep the folder the Scorer was made in. After the host moved to another
    # folder, score("clip.mp4") scored the first folder's clip.mp4 (2.4 for 8.7), named as the
    # second's: a wrong record, silently. workers=0 followed the caller, as it should.
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    write_clip(first / "clip.mp4", textured_frames(12, 96, 128, seed=1), fps=25)
    write_clip(second / "clip.mp4", textured_frames(12, 144, 176, seed=2), fps=25)
    monkeypatch.chdir(first)
    with Scorer(workers=workers, threads=1, frames=8) as scorer:
        assert scorer.score("clip.mp4").video.width == 128
        monkeypatch.chdir(second)
        records = [scorer.score("clip.mp4"), *scorer.score_many(["clip.mp4"]), scorer.submit("clip.mp4").result()]
    assert [(r.status, r.path, r.video.width) for r in records] == [("ok", "clip.mp4", 176)] * 3


# --- the record's codes ----------------------------------------------------------------------

def test_codes_the_engine_makes_are_plain_strings(tmp_path):
    # E_TIMEOUT, E_WORKER_CRASH, E_INTERNAL and E_MEMORY_LIMIT, made by this process's engine,
    # were ErrorCode members in record.error and in to_dict(): yaml.safe_dump refused the record
    # ("cannot represent an object"), and its pickle needed vqa to be read. The codes the
    # workers sent (E_NOT_FOUND, ...) were plain strings already.
    import pickle

    clip = tmp_path / "mid.mp4"
    write_clip(clip, textured_frames(30, 480, 640, seed=3), fps=25)
    with Scorer(workers=1, threads=1, timeout_s=1e-4) as scorer:  # no probe meets it (tests/engine/test_isolation.py)
        record = scorer.score(str(clip))
    assert record.error is not None and record.error["code"] == "E_TIMEOUT", record.error
    out = record.to_dict()
    assert type(record.error["code"]) is str and type(out["error"]["code"]) is str
    assert b"ErrorCode" not in pickle.dumps(out)  # read anywhere, without vqa


# --- the end of the program ----------------------------------------------------------------

DAEMON_AT_EXIT = textwrap.dedent("""
    import sys, threading
    import vqa

    if __name__ == "__main__":
        clip, first = sys.argv[1], threading.Event()

        def loop():  # a host's background thread, scoring until the program ends
            while True:
                vqa.score(clip, workers=0, threads=1, frames=8)
                first.set()

        threading.Thread(target=loop, daemon=True).start()
        first.wait(30)
        print("main returns", flush=True)
""")


def test_a_daemon_thread_scoring_as_the_program_ends_does_not_abort_it(clip, tmp_path):
    # vqa's exit hook closed the default Scorer; the daemon thread's next vqa.score() made a new
    # one, which nothing closed, and the process ended inside its model: "terminate called
    # without an active exception", exit status 134 (3 runs of 3). Now it is refused there.
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON_AT_EXIT)
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script), clip], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2)
        assert done.returncode == 0 and "terminate called" not in done.stderr, (done.returncode, done.stderr[-1500:])
        assert done.stdout.split() == ["main", "returns"]


# --- vqa.score() over many option sets ------------------------------------------------------

def test_vqa_score_keeps_the_scorers_of_a_few_option_sets(clip, monkeypatch):
    # A program that varied its options per call (frames, timeout_s) got a Scorer per option
    # set, each with its model and workers, kept to the end: 20 sets held 21 processes, 2.9 GB.
    import vqa
    import vqa.scorer.local as pipeline

    monkeypatch.setattr(pipeline, "DEFAULTS_KEPT", 2)
    made: list[Scorer] = []
    real = pipeline.Scorer

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **options):
            super().__init__(*args, **options)
            made.append(self)

    monkeypatch.setattr(pipeline, "Scorer", Counting)
    try:
        busy = pipeline.ScoreOptions(workers=0, threads=1, frames=4)
        assert vqa.score(clip, workers=0, threads=1, frames=4).ok
        pipeline._in_use[busy] += 1  # as if another thread were inside vqa.score() with it
        for frames in (5, 6, 6, 7):
            assert vqa.score(clip, workers=0, threads=1, frames=frames).ok
        assert len(made) == 4  # frames=6 was used again while kept
        assert [s.options.frames for s in made if not s._closed] == [4, 7]  # the busy one, and the last
        pipeline._in_use[busy] -= 1
        assert vqa.score(clip, workers=0, threads=1, frames=8).ok
        assert [s.options.frames for s in made if not s._closed] == [7, 8]
    finally:
        pipeline._close_defaults()


# --- a host that wants SIGPIPE -------------------------------------------------------------

SIGPIPE_DEFAULT = textwrap.dedent("""
    import os, signal, sys, time
    from vqa import Scorer

    if __name__ == "__main__":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as command-line tools do, for `| head`
        clip, long = sys.argv[1], sys.argv[2]
        with Scorer(workers=1, threads=1, frames="all") as scorer:
            for pause in (0.1, 0.2, 0.3):  # the worker dies with batches in inference
                future = scorer.submit(long)
                time.sleep(pause)
                os.kill(scorer._pool.pids[0], signal.SIGKILL)
                future.result()
            print(scorer.score(clip).status, flush=True)
""")


@pytest.mark.slow
def test_a_host_with_default_sigpipe_survives_a_worker_dying(clip, tmp_path):
    # The parent handed the dead worker's slot back down its broken pipe: SIGPIPE, at its
    # default, ended the host at once and silently (exit status 141, 5 runs of 5, the first kill).
    long = tmp_path / "long.mp4"
    write_clip(long, textured_frames(120, 240, 320, seed=7), fps=25)
    script = tmp_path / "sigpipe.py"
    script.write_text(SIGPIPE_DEFAULT)
    done = subprocess.run([sys.executable, str(script), clip, str(long)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2)
    assert done.returncode == 0 and done.stdout.split() == ["ok"], (done.returncode, done.stderr[-1500:])


# --- a host that handles Ctrl-C itself -----------------------------------------------------

GRACEFUL = textwrap.dedent("""
    import os, signal, sys, time
    from vqa import Scorer
    from vqa.engine.pool import PoolEngine

    if __name__ == "__main__":
        heard = []
        signal.signal(signal.SIGINT, lambda *_: heard.append(1))  # finish what is in hand
        plan = PoolEngine._plan

        def ctrl_c_twice(engine, video, *args, **kwargs):
            # Once the video is planned, so in a worker's hands (not after a time, which a fast
            # machine may spend scoring all of it); at the terminal the whole process group hears
            # it; the second after the first is heard, as signals of a kind do not queue.
            plan(engine, video, *args, **kwargs)
            for n in (1, 2):
                os.killpg(os.getpgid(0), signal.SIGINT)
                until = time.monotonic() + 10
                while len(heard) < n and time.monotonic() < until:
                    time.sleep(0.01)

        PoolEngine._plan = ctrl_c_twice
        with Scorer(workers=1, threads=1, frames="all") as scorer:
            before = list(scorer._pool.pids)
            record = scorer.submit(sys.argv[1]).result()
            print(record.status, record.error and record.error["code"], len(heard), scorer._pool.pids == before)
""")


@pytest.mark.slow
def test_ctrl_c_handled_by_the_host_leaves_the_workers_alone(tmp_path):
    # Each Ctrl-C also stopped the decode workers: the video in hand was retried, and at the
    # second it got E_WORKER_CRASH ("the decode worker died twice on it (exit code 0)").
    long = tmp_path / "long.mp4"
    write_clip(long, textured_frames(400, 240, 320, seed=9), fps=25)
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    done = subprocess.run([sys.executable, str(script), str(long)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2, start_new_session=True)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.split() == ["ok", "None", "2", "True"], done.stdout + done.stderr[-1500:]
