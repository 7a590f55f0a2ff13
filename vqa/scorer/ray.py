"""The same folder job on a Ray cluster: one actor per node, each holding a ``Scorer``.

    driver: run_job -> RayScorer.submit -> [least-loaded actor] -> NodeScorer (Ray actor)
                                                                  -> Scorer (vqa.scorer.local), unchanged

Both ends take one ``ScoreOptions`` (vqa.config): checked and resolved once on the driver, and
each actor resolves its own workers and threads from its share of its node's cores.

``RayScorer`` has the surface ``run_job`` drives (``submit(path, split) -> Future``, ``spec``,
``config``, ``workers``, ``close``), so resume, ``--retry-failed``, ``--fail-fast``, progress
and the summary are the local job's own code. Ray Core only (actors and tasks): no Ray Data.

One dispatcher thread in the driver owns every Ray call (placement, hand-out, failure and
shutdown all read and change the one actor table that thread owns):

- it keeps ``actors_per_node`` actors on each live node with CPUs (a node that joins gets
  its actors; one that leaves loses them), each sized to its share of the node's cores;
- it hands each request to the least-loaded ready actor, at most ``window`` videos in flight
  per actor (2 per decode worker, as the local engine admits);
- an actor that dies (its process, or its node) costs its in-flight videos: each is retried
  once on another actor, then gets ``E_WORKER_CRASH``; the actor is replaced while its node lives;
- every ``PING_S`` it asks each actor for a ping; one that has not answered within
  ``hang_s`` is killed and treated as dead. A video that hangs is the actor's own engine's
  business (``--timeout``), as on one machine.

A path that the driver can read but a node cannot (no shared filesystem there) gets the
node's own ``E_NOT_FOUND``/``E_UNREADABLE`` with the node named in the message.

Ray is imported only here, and only when a ``RayScorer`` is made (``engine="ray"``).

Long because the dispatcher thread (requests, actors, pings, retries) is one state machine that
owns every Ray call: split into modules, each would reach into its actor table. NodeScorer, the
actor, is the first 50 lines.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import signal
import socket
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..codes import ErrorCode
from ..config import ScoreOptions
from ..errors import BackendUnavailable, UsageError, VQAError
from ..futures import VideoFuture
from ..inputs import path_arg
from ..lifecycle import Owner, mark_engine_thread, refuse_on_engine_thread
from ..types import VideoScore

RAY_EXTRA = "pip install '.[ray]' in vqa's checkout"
PING_S = 2.0  # how often each actor is asked for a ping
HANG_S = 60.0  # an actor silent this long is killed and replaced
START_S = 300.0  # the first actor must be ready by then (model load, workers spawned)
RECONCILE_S = 2.0  # how often the live nodes are compared with the actors on them
WAIT_S = 0.05  # the dispatcher wakes at least this often (a new request waits at most this)
PROBE_S = 5.0  # a HOST:PORT address must accept a connection this soon
CLOSE_S = 10.0  # an actor's Scorer gets this long to close before the actor is killed
RETRIES = 1  # an actor death costs a video this many retries, then E_WORKER_CRASH
NODE_ERRORS = (ErrorCode.E_NOT_FOUND, ErrorCode.E_UNREADABLE)  # what a node that cannot see a path says


def import_ray():
    """``ray``, or BackendUnavailable naming the extra to install."""
    try:
        import ray
    except ImportError as e:
        raise BackendUnavailable(f"--engine ray needs Ray, which is not installed: {RAY_EXTRA} "
                                 f"(import failed: {e})") from None
    return ray


class NodeScorer:
    """The actor: one ``Scorer`` sized to ``cores`` of its node. Made remote by ``RayScorer``."""

    def __init__(self, options: ScoreOptions, cores: int, cwd: str | None = None):
        from .local import Scorer

        # Relative paths mean what they mean to the driver (the same folders on every node),
        # also for the decode workers the Scorer spawns from here.
        self.cwd = None
        if cwd is not None:
            try:
                os.chdir(cwd)
                self.cwd = cwd
            except OSError:
                pass  # relative paths then fail here, with this node named
        self.scorer = Scorer(options, cores=cores)  # workers and threads: per actor, from its cores
        import ray
        self.node = f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"

    def describe(self) -> dict:
        import vqa
        return {"node": self.node, "pid": os.getpid(), "cwd": self.cwd, "workers": self.scorer.workers,
                "threads": self.scorer.threads, "model": dict(self.scorer.model),
                "config": dict(self.scorer.config), "vqa": vqa.__file__}

    async def score(self, path: str, split: bool) -> VideoScore:
        import asyncio
        return await asyncio.wrap_future(self.scorer.submit(path, split=split))

    async def ping(self) -> float:
        return time.time()

    def close(self) -> None:
        self.scorer.close()


@dataclass(eq=False)
class _Request:
    path: str
    split: bool
    future: Future
    attempts: int = 0  # actor deaths so far
    tried: set = field(default_factory=set)  # actors it was sent to


@dataclass(eq=False)
class _Actor:
    handle: Any  # a Ray actor handle
    node_id: str
    cores: int
    ready_ref: object  # describe(), until the actor is ready
    info: dict | None = None
    window: int = 2
    inflight: dict = field(default_factory=dict)  # ObjectRef -> _Request
    ping_ref: object = None
    ping_sent: float = 0.0
    dead: bool = False


class RayScorer:
    """A ``Scorer`` whose videos are scored by actors on a Ray cluster.

    ``address``: the cluster (default: ``RAY_ADDRESS``; ``auto`` finds one started with
    ``ray start`` on this machine; with neither, a local cluster is started and stopped with
    this object). ``actors_per_node``: actors on each node, sharing its CPUs equally.
    Other options are ``Scorer``'s and apply on every node; ``workers`` and ``threads``, when
    given, are per actor, else each actor plans them from its share of the node's cores.
    """

    def __init__(self, options: ScoreOptions | None = None, /, *, address: str | None = None,
                 actors_per_node: int = 1, hang_s: float = HANG_S, runtime_env: dict | None = None,
                 node_class: type = NodeScorer, **kwargs):
        if options is None:
            options = ScoreOptions(**kwargs)
        elif kwargs:
            raise TypeError(f"pass a ScoreOptions or keyword options, not both ({', '.join(kwargs)})")
        self._lifecycle = Owner("RayScorer")
        # Importing Ray configures its logger, and ray.init installs a SIGTERM handler: what the
        # host program had is put back when this closes.
        self._host: dict | None = _host_state()
        try:
            self._start(options, address, actors_per_node, hang_s, runtime_env, node_class)
        except BaseException:
            self._restore_host()
            raise
        # Exit hooks run newest first: this one, made after ray.init, closes the actors' Scorers
        # (they unlink their shared memory) before Ray's own hook kills the actors.
        self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    def _start(self, options: ScoreOptions, address, actors_per_node, hang_s, runtime_env, node_class) -> None:
        from ..model import load_model_spec

        ray = self._ray = import_ray()
        if isinstance(actors_per_node, bool) or not isinstance(actors_per_node, int) or actors_per_node < 1:
            raise UsageError(f"actors_per_node must be an integer >= 1, got {actors_per_node!r}")
        from ..infer import model_files

        # Refused here, before a cluster starts. Cores are planned by each actor on its own node
        # (NodeScorer): this machine's count says nothing of theirs, and config depends on none.
        options.validate()
        self.config = options.record_config()
        self.spec = load_model_spec(options.model_dir)
        self.model = self.spec.record(model_files(options.backend, options.precision))
        self._options = options
        self.actors_per_node, self.hang_s = actors_per_node, hang_s
        self._started_ray = False
        if not ray.is_initialized():
            self._connect(address, runtime_env)
        self._remote = ray.remote(node_class)  # NodeScorer; tools measure the driver with a fake
        self._actors: list[_Actor] = []
        self._pending: queue.SimpleQueue = queue.SimpleQueue()  # _Request, or a cancelled Future
        self._waiting: list[_Request] = []
        self._by_future: dict[Future, tuple[_Actor, object]] = {}
        self._owner: dict = {}  # a score call's ObjectRef -> its _Actor
        self._lock = threading.Lock()
        self._stop = False
        self._closed = False
        self.broken: BaseException | None = None
        self._last_reconcile = 0.0
        try:
            self._reconcile()
            self._wait_first_ready()
        except BaseException:
            self._shutdown_actors()
            self._disconnect()
            raise
        self._thread = threading.Thread(target=self._run, name="vqa-ray", daemon=True)
        self._thread.start()

    # -- connecting ----------------------------------------------------------------------

    def _connect(self, address: str | None, runtime_env: dict | None) -> None:
        import vqa

        # None: RAY_ADDRESS, else a cluster `ray start` made on this machine, else a new local
        # one (Ray counts its CPUs, cgroup quota included).
        address = address or os.environ.get("RAY_ADDRESS") or None
        if runtime_env is None:
            # The actors import the vqa the driver runs (a checkout, not only an installed copy).
            here = os.path.dirname(os.path.dirname(os.path.abspath(vqa.__file__)))
            path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
            runtime_env = {"env_vars": {"PYTHONPATH": path}}
        debug = os.environ.get("VQA_DEBUG", "") not in ("", "0")
        # Ray's own warnings (its token authentication notice, on every run) are for whoever
        # runs the cluster; a vqa user sees them with VQA_DEBUG=1. Errors still show.
        level = logging.INFO if debug else logging.ERROR
        logging.getLogger("ray").setLevel(level)
        kwargs = dict(runtime_env=runtime_env, log_to_driver=debug, configure_logging=True,
                      logging_level=level, include_dashboard=False)
        try:
            _probe(address)
            self._ray.init(address=address, **kwargs)
        except (ConnectionError, ValueError, RuntimeError, OSError) as e:
            self._restore_host()
            reason = str(e).rstrip(".")
            raise UsageError(f"cannot join the Ray cluster at {address or 'this machine'}: {reason}; start one "
                             "with `ray start --head`, or unset RAY_ADDRESS to start a local one") from None
        self._started_ray = True

    def _disconnect(self) -> None:
        try:
            if self._started_ray:
                self._started_ray = False
                self._ray.shutdown()
        finally:
            self._restore_host()

    def _restore_host(self) -> None:
        host, self._host = self._host, None
        if host is not None:
            _put_back(host)

    # -- actors --------------------------------------------------------------------------

    def _live_nodes(self) -> dict[str, int]:
        return {n["NodeID"]: int(n.get("Resources", {}).get("CPU", 0)) for n in self._ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1}

    def _reconcile(self) -> None:
        """Start actors on live nodes that lack them."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._last_reconcile = time.monotonic()
        nodes = self._live_nodes()
        for node_id, cpus in nodes.items():
            have = sum(1 for a in self._actors if a.node_id == node_id and not a.dead)
            cores = max(1, cpus // self.actors_per_node)
            for _ in range(self.actors_per_node - have):
                # Pinned to its node: a node that leaves takes its actors with it, never moves them.
                handle = self._remote.options(
                    max_restarts=0, max_concurrency=1000, num_cpus=cores,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                ).remote(self._options, cores, os.getcwd())
                self._actors.append(_Actor(handle, node_id, cores, handle.describe.remote()))

    def _wait_first_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while not any(a.info for a in self._actors):
            if time.monotonic() > deadline:
                raise VQAError(f"no vqa actor was ready on the Ray cluster after {START_S:.0f} s")
            refs = [a.ready_ref for a in self._actors if not a.dead and a.ready_ref is not None]
            if not refs:
                if not self._actors:
                    raise UsageError("the Ray cluster has no node with a CPU to score on")
                raise self._startup_error or VQAError("every vqa actor failed to start")
            done, _ = self._ray.wait(refs, num_returns=1, timeout=WAIT_S)
            for ref in done:
                self._on_ready(ref)

    _startup_error: BaseException | None = None

    def _on_ready(self, ref) -> None:
        actor = next(a for a in self._actors if a.ready_ref == ref)
        actor.ready_ref = None
        try:
            info = self._ray.get(ref)
        except Exception as e:  # noqa: BLE001 - a model or option error there, or the actor died
            cause = _cause(e)
            self._startup_error = cause if isinstance(cause, VQAError) else VQAError(
                f"a vqa actor failed to start on node {actor.node_id[:12]}: {e}")
            self._drop(actor)
            if isinstance(cause, VQAError):  # the same error on every node: the job cannot run
                raise cause from None
            return
        if info["model"] != self.model or info["config"] != self.config:
            self._drop(actor)
            raise UsageError(f"node {info['node']} has another model or vqa version ({info['vqa']}): "
                             f"install the same vqa on every node")
        actor.info, actor.window = info, max(2, 2 * info["workers"])

    def _drop(self, actor: _Actor) -> None:
        """Kill ``actor`` and take its in-flight videos back: each is retried once elsewhere."""
        if actor.dead:
            return
        actor.dead = True
        try:
            self._ray.kill(actor.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        for ref, request in actor.inflight.items():
            self._owner.pop(ref, None)
            self._by_future.pop(request.future, None)
            request.attempts += 1
            if request.attempts > RETRIES:
                where = actor.info["node"] if actor.info else actor.node_id[:12]
                _resolve(request.future, self._crash_record(request.path, where))
            else:
                self._waiting.insert(0, request)
        actor.inflight.clear()
        self._actors.remove(actor)

    def _crash_record(self, path: str, node: str) -> VideoScore:
        return VideoScore(path=path, status="error", model=dict(self.model), config=dict(self.config),
                          error={"code": ErrorCode.E_WORKER_CRASH.value,
                                 "message": f"the vqa actor scoring it died twice (last on node {node})"})

    @property
    def workers(self) -> int:
        """Decode workers over every ready actor (``run_job`` sizes its look-ahead by it)."""
        return sum(a.info["workers"] for a in self._actors if a.info) or 1

    def health(self) -> dict[str, Any]:
        """As ``Scorer.health()``: ``ok`` while open, not failed and with at least one ready
        actor (a lost actor is replaced; its videos are retried on another)."""
        ready = self.actors()
        broken = self.broken
        return {"ok": not self._closed and broken is None and bool(ready), "model_loaded": bool(ready),
                "workers": self.workers, "workers_alive": sum(a["workers"] for a in ready), "actors": len(ready),
                **({"error": repr(broken)} if broken is not None else {})}

    def actors(self) -> list[dict]:
        """The ready actors: node, pid, workers, threads (for tools and tests)."""
        return [dict(a.info, node_id=a.node_id) for a in list(self._actors) if a.info]

    # -- any thread ----------------------------------------------------------------------

    def submit(self, path, split: bool = False) -> Future:
        self._lifecycle.check()
        path = path if isinstance(path, str) else path_arg(path)
        future: Future = VideoFuture()
        with self._lock:
            if self._closed or self.broken is not None:
                raise RuntimeError("this Scorer is closed" if self._closed else f"the Ray engine failed: {self.broken}")
            self._pending.put(_Request(path, split, future))
        future.add_done_callback(self._on_done)
        return future

    def _on_done(self, future: Future) -> None:
        if future.cancelled():
            self._pending.put(future)

    def score(self, path) -> VideoScore:
        return self.submit(path, split=True).result()

    def close(self) -> None:
        if not self._lifecycle.here:  # a forked child's copy: the actors and thread are the parent's
            self._closed = True
            return
        refuse_on_engine_thread("close()")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop = True
        atexit.unregister(self._at_exit)
        self._thread.join()
        try:
            self._shutdown_actors()
        finally:
            self._disconnect()

    def __enter__(self) -> RayScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the dispatcher thread -----------------------------------------------------------

    def _run(self) -> None:
        mark_engine_thread()
        try:
            while not self._stop:
                self._take()
                if time.monotonic() - self._last_reconcile > RECONCILE_S:
                    self._reconcile()
                self._ping()
                self._assign()
                refs = [r for a in self._actors for r in (*a.inflight, a.ping_ref, a.ready_ref) if r is not None]
                if not refs:
                    time.sleep(WAIT_S / 4)
                    continue
                done, rest = self._ray.wait(refs, num_returns=1, timeout=WAIT_S, fetch_local=False)
                if done and rest:  # and whatever else is done by now
                    done += self._ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=False)[0]
                for ref in done:
                    self._handle(ref)
        except BaseException as e:  # noqa: BLE001 - every caller hears of it
            self.broken = e
        finally:
            self._take()
            for request in self._waiting:
                _fail(request.future, self.broken)
            for actor in self._actors:
                for request in actor.inflight.values():
                    _fail(request.future, self.broken)

    def _take(self) -> None:
        while True:
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Request):
                if not item.future.cancelled():
                    self._waiting.append(item)
            else:  # a cancelled future: stop its task
                where = self._by_future.pop(item, None)
                if where is not None:
                    actor, ref = where
                    actor.inflight.pop(ref, None)
                    self._owner.pop(ref, None)
                    try:
                        self._ray.cancel(ref)
                    except Exception:  # noqa: BLE001 - already finished
                        pass

    def _ping(self) -> None:
        now = time.monotonic()
        for actor in list(self._actors):
            if actor.info is None:
                continue
            if actor.ping_ref is not None and now - actor.ping_sent > self.hang_s:
                self._drop(actor)  # it stopped answering: killed, its videos go elsewhere
            elif actor.ping_ref is None and now - actor.ping_sent > PING_S:
                actor.ping_ref, actor.ping_sent = actor.handle.ping.remote(), now

    def _assign(self) -> None:
        while self._waiting:
            request = self._waiting[0]
            if request.future.cancelled():
                self._waiting.pop(0)
                continue
            ready = [a for a in self._actors if a.info and len(a.inflight) < a.window]
            if not ready:
                return
            fresh = [a for a in ready if id(a) not in request.tried] or ready  # a retry goes elsewhere
            actor = min(fresh, key=lambda a: len(a.inflight) / a.window)
            self._waiting.pop(0)
            ref = actor.handle.score.remote(request.path, request.split)
            request.tried.add(id(actor))
            actor.inflight[ref] = request
            self._owner[ref] = actor
            self._by_future[request.future] = (actor, ref)

    def _handle(self, ref) -> None:
        actor = self._owner.pop(ref, None) or next(
            (a for a in self._actors if ref == a.ping_ref or ref == a.ready_ref), None)
        if actor is None or actor.dead:
            return
        if ref == actor.ready_ref:
            self._on_ready(ref)
            return
        try:
            value = self._ray.get(ref)
        except self._ray.exceptions.TaskCancelledError:
            actor.inflight.pop(ref, None)
            return
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError,
                self._ray.exceptions.ObjectLostError):
            self._drop(actor)  # the actor or its node died
            return
        except Exception as e:  # noqa: BLE001 - a fault in the actor's code: the caller hears of it
            request = actor.inflight.pop(ref, None)
            if request is not None:
                self._by_future.pop(request.future, None)
                _fail(request.future, _cause(e))
            return
        if ref == actor.ping_ref:
            actor.ping_ref = None
            return
        request = actor.inflight.pop(ref, None)
        if request is None:
            return
        self._by_future.pop(request.future, None)
        _resolve(request.future, self._name_node(value, actor))

    def _name_node(self, record: VideoScore, actor: _Actor) -> VideoScore:
        """A path this driver can read but the node says it cannot: name the node."""
        if record.status == "error" and record.error and record.error.get("code") in NODE_ERRORS:
            if os.access(record.path, os.R_OK):
                record.error = dict(record.error, message=(
                    f"{record.error['message']} (on node {actor.info and actor.info['node']}; the driver can read it: "
                    f"every node must see the same files, e.g. through a shared filesystem)"))
        return record

    def _shutdown_actors(self) -> None:
        """Close each ready actor's Scorer (it unlinks its shared memory: Ray kills an actor's
        children with it, multiprocessing's resource tracker included), then kill them all."""
        closing = [a.handle.close.remote() for a in self._actors if a.info is not None]
        # An actor still being placed is waited for too: killing it mid-creation makes Ray's
        # core worker print "Actor creation cancelled" on the user's stderr.
        closing += [a.ready_ref for a in self._actors if a.info is None and a.ready_ref is not None]
        if closing:
            try:
                self._ray.wait(closing, num_returns=len(closing), timeout=CLOSE_S)
            except Exception:  # noqa: BLE001 - the cluster is going: kill what is left
                pass
        for actor in self._actors:
            try:
                self._ray.kill(actor.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors.clear()


def _close_at_exit(ref: weakref.ref) -> None:
    scorer = ref()
    if scorer is not None and scorer._lifecycle.here:
        try:
            scorer.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


def _probe(address: str | None, timeout_s: float = PROBE_S) -> None:
    """ConnectionError when nothing answers at a HOST:PORT address: ray.init would retry it for
    minutes. ("auto" and no address are Ray's own to resolve.)"""
    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # not HOST:PORT: Ray says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(f"nothing answers at {host}:{port} ({e.strerror or e})") from None


def _host_state() -> dict:
    """What ray.init changes in the host program: its SIGTERM and SIGINT handlers (main thread
    only) and the "ray" logger."""
    logger = logging.getLogger("ray")
    state: dict = {"logger": (logger.level, logger.propagate, list(logger.handlers))}
    if threading.current_thread() is threading.main_thread():
        state["signals"] = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    return state


def _put_back(state: dict) -> None:
    logger = logging.getLogger("ray")
    level, logger.propagate, logger.handlers = state["logger"]
    logger.setLevel(level)  # not .level: setLevel also clears the loggers' cached levels
    if threading.current_thread() is threading.main_thread():
        for sig, handler in state.get("signals", {}).items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)


def _cause(e: BaseException) -> BaseException:
    """The exception raised in the actor, where Ray wrapped it."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e


def _resolve(future: Future, record: VideoScore) -> None:
    if future.set_running_or_notify_cancel():
        future.set_result(record)


def _fail(future: Future, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.cancel()
    elif future.set_running_or_notify_cancel():
        future.set_exception(error)
