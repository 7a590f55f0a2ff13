"""CUDA inferencer: the PyTorch network and shipped weights on an NVIDIA GPU.

Precision: ``fp32`` runs the network in float32 (TF32 matmuls off, so scores stay close to the
CPU's); ``fp16`` runs it with weights and activations in float16 (``half_weights``; without
it, under ``torch.autocast(float16)`` with the weights kept in float32).
Batches are padded to a bucket (vqa.infer.buckets) and each bucket's forward pass is captured
once as a CUDA graph, on its first use, then replayed. Inputs travel uint8 on a copy stream of
their own, so one batch is copied in (and its views finished: vqa.infer.finish) while the last
replays: views through a pinned host buffer, ring rows straight from the ring once the engine
has given it to ``pin`` (registered with CUDA; no staging copy). The conversion to float and the
channel order happen inside the graph.

Speed options (``SPEED_OPTIONS``; ``scripts/bench/gpu_check.py --variants`` measures each with its
agreement against the CPU before any becomes a default; only ``half_weights`` is on): ``tf32``
lets cuDNN and matmuls use TF32 in fp32, ``channels_last`` keeps the weights in NHWC (the
input already is), ``cudnn_benchmark`` lets cuDNN time its algorithms in the eager passes
before capture, ``half_weights`` runs fp16 with the weights and activations in float16 (no
autocast, so no casts inside the graph; normalisation layers in float16 too): on the H200,
15,270 views/s at the engine's batch of 32 against 13,902 with autocast, in one run, with
records 0.033 points from the CPU's on mean (docs/performance/results/h200-2026-12-02). TF32 and
benchmark are torch-wide switches: they are set as each graph is captured, which is when they
choose the kernels the graph keeps.
"""
from __future__ import annotations

import queue
import threading

import numpy as np
import torch

from ..errors import BackendUnavailable
from .base import Inferencer
from .buckets import BUCKETS, fill_bucket, plan_chunks
from .finish import ViewFinisher
from .network import OUTPUTS, QualityNet

WARMUP_RUNS = 3  # eager passes on the side stream before capture, as torch.cuda.graphs asks
SLOTS = 2  # pinned buffers per bucket: one filling while the GPU runs the other
HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable
SPEED_OPTIONS = {"tf32": False, "channels_last": False, "cudnn_benchmark": False,  # the defaults
                 "half_weights": True}


def _set_switches(tf32: bool, cudnn_benchmark: bool) -> None:
    """torch's process-wide kernel switches, as this inferencer's graphs are captured with."""
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cudnn_benchmark


def cuda_problem() -> str | None:
    """Why this process cannot run the cuda backend, or None when it can."""
    if torch.version.cuda is None:
        return (f"this torch ({torch.__version__}) is a CPU-only build; install a CUDA build of torch "
                f"(https://pytorch.org/get-started/locally/) or use --backend openvino")
    try:
        if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
            return "no CUDA device is visible (torch.cuda.is_available() is False); use --backend openvino"
    except Exception as e:  # a broken driver raises here rather than answering False
        return f"CUDA did not initialise ({type(e).__name__}: {e}); use --backend openvino"
    return None


class _Pinned:
    """One in-flight batch's buffers; ``free`` is held from fill until collected."""

    def __init__(self, size: int, view: int, device):
        self.host_in = torch.empty((size, view, view, 3), dtype=torch.uint8).pin_memory()
        self.host_np = self.host_in.numpy()
        self.host_out = torch.empty((size, OUTPUTS), dtype=torch.float32).pin_memory()
        self.host_rows: torch.Tensor | None = None  # staged ring rows (submit_rows), made on first use
        self.dev_views = torch.zeros((size, view, view, 3), dtype=torch.uint8, device=device)  # before dev_in
        self.dev_rows: torch.Tensor | None = None  # ring rows on the device (submit_rows), made on first use
        self.loaded = torch.cuda.Event()  # dev_views holds this batch's views
        self.done = torch.cuda.Event()
        self.free = threading.Semaphore(1)

    def rows(self, size: int, row_bytes: int) -> torch.Tensor:
        if self.host_rows is None or self.host_rows.shape[1] != row_bytes:
            self.host_rows = torch.empty((size, row_bytes), dtype=torch.uint8).pin_memory()
        return self.host_rows

    def device_rows(self, size: int, row_bytes: int) -> torch.Tensor:
        if self.dev_rows is None or self.dev_rows.shape[1] != row_bytes:
            self.dev_rows = torch.empty((size, row_bytes), dtype=torch.uint8, device=self.dev_views.device)
        return self.dev_rows


class _BucketGraph:
    """One bucket's device tensors, captured graph and ``SLOTS`` buffers: while the GPU runs
    one batch, the next is copied in and its views finished on the copy stream."""

    def __init__(self, net: QualityNet, size: int, view: int, fp16: bool, device, stream,
                 channels_last: bool = False, half_weights: bool = False):
        self.slots = [_Pinned(size, view, device) for _ in range(SLOTS)]
        self._next = 0
        self.dev_in = torch.zeros((size, view, view, 3), dtype=torch.uint8, device=device)

        def forward() -> torch.Tensor:
            # .float() keeps the permuted NHWC strides; channels_last also puts the weights in NHWC.
            x = self.dev_in.permute(0, 3, 1, 2)
            x = x.half() if half_weights else x.float()  # uint8 0-255 is exact in either
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if half_weights:
                return net(x).float()
            # cache_enabled=False: autocast's weight cache must not outlive a graph capture.
            with torch.autocast("cuda", dtype=torch.float16, enabled=fp16, cache_enabled=False):
                return net(x).float()

        stream.wait_stream(torch.cuda.current_stream(device))  # dev_in and the weights are ready
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(WARMUP_RUNS):
                forward()
            stream.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            # thread_local: another thread's CUDA call during capture does not invalidate it.
            with torch.cuda.graph(self.graph, stream=stream, capture_error_mode="thread_local"):
                self.dev_out = forward()
        stream.synchronize()

    def enqueue(self, views: np.ndarray, stream, copier) -> tuple[_Pinned, int]:
        """Fill a free pinned buffer and queue copy in (on ``copier``), replay, copy out (on
        ``stream``); the caller collects ``slot.host_out`` after ``slot.done`` and releases
        ``slot.free``."""
        def load(slot: _Pinned) -> int:
            n = fill_bucket(slot.host_np, views)
            slot.dev_views.copy_(slot.host_in, non_blocking=True)
            return n

        return self._run(load, stream, copier)

    def enqueue_rows(self, rows: np.ndarray, cuts, stream, copier, finish: ViewFinisher,
                     pinned: bool) -> tuple[_Pinned, int]:
        """``enqueue`` for ring rows (vqa.preprocess.cut): the rows go to the device as they
        are and ``finish`` makes the views there, beside the previous replay. ``pinned``
        rows (the ring, registered with CUDA) are copied straight from where they lie, so they
        are read until ``slot.done``; others are staged through this slot's pinned buffer."""
        n, row_bytes = rows.shape
        size = len(self.dev_in)
        if n > size:
            raise ValueError(f"{n} rows do not fit a bucket of {size}")

        def load(slot: _Pinned) -> int:
            dev = slot.device_rows(size, row_bytes)
            if pinned:
                dev[:n].copy_(torch.from_numpy(rows), non_blocking=True)
            else:
                host = slot.rows(size, row_bytes)
                used = max(self.dev_in[0].numel(), max((finish.geometry.grid * c) ** 2 * 3 for c in cuts))
                host.numpy()[:n, :used] = rows[:, :used]  # a row's bytes past its view or mosaic are never read
                dev[:n].copy_(host[:n], non_blocking=True)
            finish(dev[:n], cuts, slot.dev_views[:n])
            slot.dev_views[n:].zero_()  # the padding, as fill_bucket leaves it
            return n

        return self._run(load, stream, copier)

    def _run(self, load, stream, copier) -> tuple[_Pinned, int]:
        """Take the next buffer once its last batch is collected; on ``copier``: ``load`` its
        views into ``slot.dev_views``; on ``stream``, once loaded: copy them into ``dev_in``
        (the graph's input), replay, copy the outputs out, record ``done``. The copy (and finish)
        of one batch runs beside the replay of the last."""
        slot = self.slots[self._next]
        self._next = (self._next + 1) % len(self.slots)
        slot.free.acquire()  # its previous batch has been collected: its buffers are free
        try:
            with torch.cuda.stream(copier):
                n = load(slot)
                slot.loaded.record(copier)
            with torch.cuda.stream(stream):
                stream.wait_event(slot.loaded)
                self.dev_in.copy_(slot.dev_views)
                self.graph.replay()
                slot.host_out.copy_(self.dev_out, non_blocking=True)
                slot.done.record(stream)
        except BaseException:
            slot.free.release()
            raise
        return slot, n


def _drain_error(device) -> None:
    """A refused cudaHostRegister leaves its error to CUDA's next check (torch's, after some
    kernel): a small kernel and a sync take it now, so it cannot fail a later batch."""
    try:
        torch.ones(1, dtype=torch.uint8, device=device).add_(1)
        torch.cuda.synchronize(device)
    except RuntimeError:
        pass


def _collect_one(slot: _Pinned, n: int) -> np.ndarray:
    """Wait for ``slot``'s batch, copy its ``n`` real rows out, free the slot."""
    try:
        slot.done.synchronize()
        return slot.host_out.numpy()[:n].copy()
    finally:
        slot.free.release()


class CUDAInferencer(Inferencer):
    BACKEND_NAME = "cuda"
    PRECISIONS = {"fp32": "pytorch", "fp16": "pytorch"}

    def __init__(self, spec, *, threads=None, precision="fp32", mode="latency", buckets=BUCKETS, **speed):
        super().__init__(spec, threads=threads, precision=precision, mode=mode)
        unknown = set(speed) - set(SPEED_OPTIONS)
        if unknown:
            raise TypeError(f"unknown cuda speed options {sorted(unknown)}; known: {sorted(SPEED_OPTIONS)}")
        problem = cuda_problem()
        if problem is not None:
            raise BackendUnavailable(f"backend 'cuda' cannot run here: {problem}")
        self.speed = {**SPEED_OPTIONS, **{k: bool(v) for k, v in speed.items()}}
        self.buckets = tuple(sorted(buckets))
        self._view = spec.view_size
        self._graphs: dict[int, _BucketGraph] = {}
        self._lock = threading.Lock()  # graphs are captured and batches queued one at a time
        self._pending: queue.Queue = queue.Queue()  # (slot, rows, done) in submission order; None: stop
        self._collector: threading.Thread | None = None
        self._pinned: dict[int, int] = {}  # host memory registered by pin(): start -> end address
        try:
            self._device = torch.device("cuda", torch.cuda.current_device())
            state = torch.load(spec.path("pytorch"), weights_only=True, map_location="cpu")
            net = QualityNet()
            net.load_state_dict(state)
            net = net.eval().to(self._device)
            if self.speed["half_weights"] and precision == "fp16":
                net = net.half()
            self._net = net.to(memory_format=torch.channels_last) if self.speed["channels_last"] else net
            self._stream = torch.cuda.Stream(self._device)
            self._copier = torch.cuda.Stream(self._device)  # copies in, beside the replays
            self._finish = ViewFinisher(spec.preprocessing, self._device)
        except RuntimeError as e:  # out of memory, a device in exclusive use
            raise BackendUnavailable(f"backend 'cuda' could not load the model on the GPU: {e}") from None
        # TF32 (off by default) may move fp32 scores further from the CPU's: gpu_check.py measures it.
        _set_switches(self.speed["tf32"], self.speed["cudnn_benchmark"])

    def _graph(self, bucket: int) -> _BucketGraph:
        graph = self._graphs.get(bucket)
        if graph is None:  # captured lazily: a job at batch 4 never pays for the 512 graph
            _set_switches(self.speed["tf32"], self.speed["cudnn_benchmark"])
            graph = self._graphs[bucket] = _BucketGraph(self._net, bucket, self._view, self.precision == "fp16",
                                                        self._device, self._stream, self.speed["channels_last"],
                                                        self.speed["half_weights"] and self.precision == "fp16")
        return graph

    def _check(self, views: np.ndarray) -> np.ndarray:
        views = np.ascontiguousarray(views, dtype=np.uint8)
        if views.ndim != 4 or views.shape[1:] != (self._view, self._view, 3):
            raise ValueError(f"views must be (N, {self._view}, {self._view}, 3) uint8, got {views.shape}")
        return views

    def submit(self, views, done) -> None:
        """Queue ``views`` on the GPU and return once they are in pinned memory (``views`` may be
        reused then); ``done`` gets the outputs from the collecting thread."""
        whole: np.ndarray | BaseException | None = None
        try:
            views = self._check(views)
            chunks = plan_chunks(len(views), self.buckets) if len(views) else []
            if len(chunks) != 1:  # empty, or past the largest bucket: rare, run it whole
                whole = self.infer(views)
            else:
                with self._lock:
                    slot, n = self._graph(chunks[0][2]).enqueue(views, self._stream, self._copier)
        except Exception as e:  # handed over like a failure on the GPU would be
            whole = e
        if whole is not None:
            done(whole)
            return
        self._start_collector()
        self._pending.put((slot, n, done))

    def submit_rows(self, rows, cuts, done) -> None:
        """``submit`` for ring rows as ``vqa.preprocess.cut`` left them: the views are finished
        on the GPU (vqa.infer.finish), so the decode workers skip the area resampling. Rows in
        memory given to ``pin`` are read from there until ``done``; others are copied first."""
        queued = None
        try:
            rows = np.ascontiguousarray(rows, dtype=np.uint8)
            cuts = [int(c) for c in cuts]
            if rows.ndim != 2 or len(cuts) != len(rows):
                raise ValueError(f"rows must be (N, bytes) uint8 with N cuts, got {rows.shape} and {len(cuts)}")
            chunks = plan_chunks(len(rows), self.buckets) if len(rows) else []
            if len(chunks) == 1:
                with self._lock:
                    queued = self._graph(chunks[0][2]).enqueue_rows(rows, cuts, self._stream, self._copier,
                                                                    self._finish, self._is_pinned(rows))
        except Exception as e:  # handed over like a failure on the GPU would be
            done(e)
            return
        if queued is None:  # empty, or past the largest bucket: rare, finished on the CPU
            super().submit_rows(rows, cuts, done)
            return
        self._start_collector()
        self._pending.put((*queued, done))

    def pin(self, buffer: np.ndarray):
        """Register ``buffer`` (the ring) with CUDA, so its rows are copied to the GPU straight
        from where they lie, with no staging copy by the submitting thread. Where CUDA refuses
        (a limit on locked memory), rows are staged as before."""
        start, nbytes = buffer.ctypes.data, buffer.nbytes
        try:
            cudart = torch.cuda.cudart()
            # Portable: pinned for every device's context, not only the calling thread's current one.
            registered = nbytes > 0 and int(cudart.cudaHostRegister(start, nbytes, HOST_REGISTER_PORTABLE)) == 0
        except (RuntimeError, AttributeError):  # a torch without the binding: stage as before
            registered = False
        if not registered:
            _drain_error(self._device)
            return lambda: None
        self._pinned[start] = start + nbytes

        def unpin() -> None:
            if self._pinned.pop(start, None) is not None and int(cudart.cudaHostUnregister(start)) != 0:
                _drain_error(self._device)
        return unpin

    def _is_pinned(self, rows: np.ndarray) -> bool:
        start = rows.ctypes.data
        return any(a <= start and start + rows.nbytes <= b for a, b in list(self._pinned.items()))

    def _start_collector(self) -> None:
        with self._lock:
            if self._collector is None:
                self._collector = threading.Thread(target=self._collect, name="vqa-cuda-collect", daemon=True)
                self._collector.start()

    def _collect(self) -> None:
        while (item := self._pending.get()) is not None:
            slot, n, done = item
            try:
                out: np.ndarray | BaseException = _collect_one(slot, n)
            except Exception as e:  # an error on the device surfaces at the sync
                out = e
            try:
                done(out)
            finally:
                self._pending.task_done()
        self._pending.task_done()

    def wait(self) -> None:
        self._pending.join()

    def infer(self, views: np.ndarray) -> np.ndarray:
        views = self._check(views)
        if len(views) == 0:
            return np.zeros((0, OUTPUTS), dtype=np.float32)
        parts = []
        for start, stop, bucket in plan_chunks(len(views), self.buckets):
            # One chunk in flight at a time: holding a buffer while waiting for another could
            # deadlock against a concurrent submit(). Chunks come only past the largest bucket.
            with self._lock:
                queued = self._graph(bucket).enqueue(views[start:stop], self._stream, self._copier)
            parts.append(_collect_one(*queued))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def infer_device(self, views: torch.Tensor) -> np.ndarray:
        """``infer`` for (N, V, V, 3) uint8 views on this GPU, made on the calling thread's current
        stream (vqa.engine.gpu): the copy into a bucket waits for that stream, then replays."""
        if views.dtype != torch.uint8 or views.ndim != 4 or tuple(views.shape[1:]) != (self._view, self._view, 3):
            raise ValueError(f"views must be (N, {self._view}, {self._view}, 3) uint8, got {tuple(views.shape)}")
        if len(views) == 0:
            return np.zeros((0, OUTPUTS), dtype=np.float32)
        views = views.to(self._device)
        producer = torch.cuda.current_stream(self._device)
        parts = []
        for start, stop, bucket in plan_chunks(len(views), self.buckets):
            part = views[start:stop]

            def load(slot: _Pinned, part: torch.Tensor = part) -> int:
                self._copier.wait_stream(producer)
                part.record_stream(self._copier)  # not freed for reuse until the copy has read it
                slot.dev_views[:len(part)].copy_(part)
                slot.dev_views[len(part):].zero_()
                return len(part)

            with self._lock:
                queued = self._graph(bucket)._run(load, self._stream, self._copier)
            parts.append(_collect_one(*queued))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        if self._collector is not None:
            self._pending.put(None)
            self._collector.join()
            self._collector = None
        with self._lock:
            self._graphs.clear()
            self._net = None
        for start in list(self._pinned):  # a caller that never withdrew its buffer
            self._pinned.pop(start)
            torch.cuda.cudart().cudaHostUnregister(start)
