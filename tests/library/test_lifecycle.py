"""Issue 17, items 7, 8 and 9: a Scorer inside other programs. A forked child neither stops the
parent's engine when it exits nor hangs when it tries to use it (a clear error at once); a
blocking call from a future's done-callback is a clear error, not a deadlock, and the Scorer
still closes; a Scorer dropped without close() is released when collected, with a
ResourceWarning as an unclosed file gives."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
from tests.support.clips import textured_frames, write_clip
from tests.support.engine import mapped_segments

from vqa import Scorer
from vqa.lifecycle import CallbackError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 60  # a few tiny clips; past this it is a hang


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("lifecycle") / "c.mp4"
    write_clip(path, textured_frames(12, 96, 128), fps=25)
    return str(path)


# --- forks --------------------------------------------------------------------------------

FORK = textwrap.dedent("""
    import gc, json, os, sys
    from vqa import Scorer

    if __name__ == "__main__":
        clip, child_does = sys.argv[1], sys.argv[2]
        scorer = Scorer(workers=1, threads=1, frames=8)
        first = scorer.score(clip).status
        pids, ring = list(scorer._pool.pids), scorer._ring.spec.name
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: exit hooks run as it leaves (sys.exit, not os._exit)
            os.close(read)
            said = ""
            try:
                if child_does == "score":
                    scorer.score(clip)
                elif child_does == "close":
                    scorer.close()
                elif child_does == "drop":
                    del scorer
                    gc.collect()
            except Exception as e:
                said = f"{type(e).__name__}: {e}"
            os.write(write, said.encode())
            sys.exit(0)
        os.close(write)
        said = os.read(read, 4096).decode()
        os.waitpid(pid, 0)
        alive = all(os.path.exists(f"/proc/{p}") for p in pids)
        ring_there = os.path.exists(f"/dev/shm/{ring}")
        after = scorer.score(clip)
        print(json.dumps({"first": first, "said": said, "workers_alive": alive,
                          "same_workers": scorer._pool.pids == pids, "ring": ring_there,
                          "after": after.status, "error": after.error}))
        scorer.close()
""")


@pytest.mark.parametrize("child_does", ["exit", "close", "drop", "score"])
def test_a_forked_child_leaves_the_parents_engine_alone(clip, tmp_path, child_does):
    script = tmp_path / "fork.py"
    script.write_text(FORK)
    proc = subprocess.run([sys.executable, str(script), clip, child_does], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["first"] == "ok" and got["after"] == "ok", got
    assert got["workers_alive"] and got["same_workers"] and got["ring"], got  # nothing of the parent's stopped
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    if child_does == "score":  # at once, and saying why
        assert got["said"].startswith("ForkedError:") and "fork" in got["said"], got["said"]
    else:
        assert got["said"] == ""


# --- done-callbacks -----------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 1])
def test_score_or_close_in_a_done_callback_is_a_clear_error_and_close_still_works(clip, workers):
    scorer = Scorer(workers=workers, threads=1, frames=8)
    raised: list[BaseException] = []
    called = threading.Event()

    def callback(_future):
        for blocking in (lambda: scorer.score(clip), scorer.close):
            try:
                blocking()
            except BaseException as e:  # noqa: BLE001 - what the test looks at
                raised.append(e)
        called.set()

    future = scorer.submit(clip)
    future.add_done_callback(callback)
    assert called.wait(DEADLINE_S), "the callback never ran, or hangs"
    assert [type(e) for e in raised] == [CallbackError, CallbackError], raised
    assert "callback" in str(raised[0]) and "submit" in str(raised[0])
    assert scorer.submit(clip).result(timeout=DEADLINE_S).status == "ok"  # the engine goes on
    nested = []
    scorer.submit(clip).add_done_callback(lambda f: nested.append(scorer.submit(clip)))  # this works
    closer = threading.Thread(target=scorer.close)
    while not nested:
        called.wait(0.05)
    assert nested[0].result(timeout=DEADLINE_S).status == "ok"
    closer.start()
    closer.join(DEADLINE_S)
    assert not closer.is_alive(), "close() hangs"


# --- dropped Scorers ----------------------------------------------------------------------

def _threads() -> int:
    return sum(t.name in ("vqa-dispatch", "vqa-engine") for t in threading.enumerate())


@pytest.mark.parametrize("workers", [0, 1])
def test_dropped_scorers_are_released_with_a_resource_warning(clip, workers):
    import multiprocessing

    gc.collect()
    before_children = {p.pid for p in multiprocessing.active_children()}
    before_rings, before_threads = mapped_segments(os.getpid()), _threads()
    before_fds = len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(3):
            scorer = Scorer(workers=workers, threads=1, frames=8)
            assert scorer.score(clip).status == "ok"
            del scorer  # never closed
        gc.collect()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning) and "unclosed Scorer" in str(w.message)]
    assert len(unclosed) == 3, [str(w.message) for w in caught]
    assert {p.pid for p in multiprocessing.active_children()} <= before_children  # workers gone
    assert mapped_segments(os.getpid()) <= before_rings  # rings unmapped (and unlinked)
    assert _threads() == before_threads
    assert len(os.listdir("/proc/self/fd")) <= before_fds + 2  # descriptors back (a cache may keep one)


DEFAULT_IN_CHILD = textwrap.dedent("""
    import os, sys
    import vqa

    if __name__ == "__main__":
        clip = sys.argv[1]
        options = dict(workers=1, threads=1, frames=8)
        print("parent", vqa.score(clip, **options).status, flush=True)
        pid = os.fork()
        if pid == 0:
            print("child", vqa.score(clip, **options).status, flush=True)
            sys.exit(0)
        os.waitpid(pid, 0)
        print("parent", vqa.score(clip, **options).status, flush=True)
""")


def test_vqa_score_in_a_forked_child_makes_its_own_default_scorer(clip, tmp_path):
    script = tmp_path / "default.py"
    script.write_text(DEFAULT_IN_CHILD)
    proc = subprocess.run([sys.executable, str(script), clip], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=DEADLINE_S * 2)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["parent", "ok", "child", "ok", "parent", "ok"], proc.stdout + proc.stderr


# --- a pool worker, and a worker that cannot be started (the fourth attack) -----------------

POOL_TASK = textwrap.dedent("""
    import multiprocessing as mp, sys
    import vqa

    def task(args):
        path, options = args
        try:
            return vqa.score(path, **options).status
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    if __name__ == "__main__":
        with mp.get_context("spawn").Pool(1) as pool:
            print(pool.map(task, [(sys.argv[1], {}), (sys.argv[1], {"workers": 2})]))
""")


def test_vqa_score_in_a_multiprocessing_pool_worker(clip, tmp_path):
    # A daemonic process may start no child: vqa.score() raised a bare AssertionError there.
    script = tmp_path / "pool_task.py"
    script.write_text(POOL_TASK)
    done = subprocess.run([sys.executable, str(script), clip], capture_output=True, text=True,
                          timeout=DEADLINE_S * 3, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    auto, two = eval(done.stdout.strip())  # noqa: S307 - the list the script printed
    assert auto == "ok"  # decoded in the pool worker itself
    assert two.startswith("UsageError: this is a daemonic process") and "workers=0" in two


CWD_GONE = textwrap.dedent("""
    import os, shutil, signal, sys, time
    from vqa import Scorer

    if __name__ == "__main__":
        clip, doomed = sys.argv[1], sys.argv[2]
        os.chdir(doomed)
        scorer = Scorer(workers=2, threads=1, frames=8)
        shutil.rmtree(doomed)  # multiprocessing asks for the cwd when it spawns
        dead = scorer._pool.pids[0]
        os.kill(dead, signal.SIGKILL)

        def running(pid):
            try:
                return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        until = time.monotonic() + 10
        while running(dead) and time.monotonic() < until:
            time.sleep(0.01)  # until the kernel has it dead (a zombie or gone)
        said = []
        for _ in range(2):
            try:
                said.append([r.status for r in scorer.score_many([clip, clip])])
            except Exception as e:
                said.append(f"{type(e).__name__}: {e}")
        os.chdir("/")
        said.append([r.status for r in scorer.score_many([clip, clip])])
        scorer.close()

        def children():
            kids = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
            names = []
            for k in kids:
                try:
                    names.append(open(f"/proc/{k}/cmdline").read())
                except OSError:
                    pass  # gone since
            return [n for n in names if "resource_tracker" not in n]

        until = time.monotonic() + 10
        while children() and time.monotonic() < until:
            time.sleep(0.01)  # close() has killed the workers; the kernel may still list them
        print(repr((said, children())))
""")


def test_a_worker_that_cannot_be_started_is_a_clear_error_and_the_scorer_recovers(clip, tmp_path):
    # It raised AssertionError ("can only join a started process"), then a bare AssertionError
    # on every later call, and left a decode worker running after close().
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    script = tmp_path / "cwd_gone.py"
    script.write_text(CWD_GONE)
    done = subprocess.run([sys.executable, str(script), clip, str(doomed)], capture_output=True, text=True,
                          timeout=DEADLINE_S * 2, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said, others = eval(done.stdout.strip())  # noqa: S307 - the tuple the script printed
    for failed in said[:2]:
        # the first restart may find a worker still alive and the rest fail; each says why
        assert failed == ["ok", "ok"] or (failed.startswith("ResourceError: a decode worker could not be started")
                                          and "current folder was deleted" in failed), said
    assert any(isinstance(s, str) for s in said[:2]), said
    assert said[2] == ["ok", "ok"]  # the cause gone, a later call starts afresh
    assert others == []  # no worker outlives close()
