"""CUDA inferencer: the PyTorch network and shipped weights on an NVIDIA GPU.

Precision: ``fp32`` runs the network in float32 (TF32 matmuls off, so scores stay close to the
CPU's); ``fp16`` runs it under ``torch.autocast(float16)`` with the weights kept in float32.
Batches are padded to a bucket (vqa.infer.buckets) and each bucket's forward pass is captured
once as a CUDA graph, on its first use, then replayed. Views travel uint8 through a pinned host
buffer, copied with ``non_blocking`` on this inferencer's stream; the conversion to float and
the channel order happen inside the graph.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from ..errors import BackendUnavailable
from .base import Inferencer
from .buckets import BUCKETS, fill_bucket, plan_chunks
from .network import OUTPUTS, QualityNet

WARMUP_RUNS = 3  # eager passes on the side stream before capture, as torch.cuda.graphs asks


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


class _BucketGraph:
    """One bucket's pinned input, device tensors and captured graph."""

    def __init__(self, net: QualityNet, size: int, view: int, fp16: bool, device, stream):
        self.host_in = torch.empty((size, view, view, 3), dtype=torch.uint8).pin_memory()
        self.host_np = self.host_in.numpy()
        self.dev_in = torch.zeros((size, view, view, 3), dtype=torch.uint8, device=device)
        self.host_out = torch.empty((size, OUTPUTS), dtype=torch.float32).pin_memory()
        self.done = torch.cuda.Event()

        def forward() -> torch.Tensor:
            x = self.dev_in.permute(0, 3, 1, 2).float()
            # cache_enabled=False: autocast's weight cache must not outlive a graph capture.
            with torch.autocast("cuda", dtype=torch.float16, enabled=fp16, cache_enabled=False):
                return net(x).float()

        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(WARMUP_RUNS):
                forward()
            stream.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=stream):
                self.dev_out = forward()

    def run(self, views: np.ndarray, stream) -> np.ndarray:
        n = fill_bucket(self.host_np, views)
        with torch.cuda.stream(stream):
            self.dev_in.copy_(self.host_in, non_blocking=True)
            self.graph.replay()
            self.host_out.copy_(self.dev_out, non_blocking=True)
            self.done.record(stream)
        self.done.synchronize()
        return self.host_out.numpy()[:n].copy()


class CUDAInferencer(Inferencer):
    BACKEND_NAME = "cuda"
    PRECISIONS = {"fp32": "pytorch", "fp16": "pytorch"}

    def __init__(self, spec, *, threads=None, precision="fp32", mode="latency", buckets=BUCKETS):
        super().__init__(spec, threads=threads, precision=precision, mode=mode)
        problem = cuda_problem()
        if problem is not None:
            raise BackendUnavailable(f"backend 'cuda' cannot run here: {problem}")
        self.buckets = tuple(sorted(buckets))
        self._view = spec.view_size
        self._graphs: dict[int, _BucketGraph] = {}
        self._lock = threading.Lock()  # one batch at a time owns the pinned buffers
        try:
            self._device = torch.device("cuda", torch.cuda.current_device())
            state = torch.load(spec.path("pytorch"), weights_only=True, map_location="cpu")
            net = QualityNet()
            net.load_state_dict(state)
            self._net = net.eval().to(self._device)
            self._stream = torch.cuda.Stream(self._device)
        except RuntimeError as e:  # out of memory, a device in exclusive use
            raise BackendUnavailable(f"backend 'cuda' could not load the model on the GPU: {e}") from None
        # TF32 would move fp32 scores by more than the 0.1-point tolerance against the CPU.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False

    def _graph(self, bucket: int) -> _BucketGraph:
        graph = self._graphs.get(bucket)
        if graph is None:  # captured lazily: a job at batch 4 never pays for the 512 graph
            graph = self._graphs[bucket] = _BucketGraph(self._net, bucket, self._view,
                                                        self.precision == "fp16", self._device, self._stream)
        return graph

    def infer(self, views: np.ndarray) -> np.ndarray:
        views = np.ascontiguousarray(views, dtype=np.uint8)
        if views.ndim != 4 or views.shape[1:] != (self._view, self._view, 3):
            raise ValueError(f"views must be (N, {self._view}, {self._view}, 3) uint8, got {views.shape}")
        if len(views) == 0:
            return np.zeros((0, OUTPUTS), dtype=np.float32)
        with self._lock:
            parts = [self._graph(bucket).run(views[start:stop], self._stream)
                     for start, stop, bucket in plan_chunks(len(views), self.buckets)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def close(self) -> None:
        with self._lock:
            self._graphs.clear()
            self._net = None
