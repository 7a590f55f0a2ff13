"""PyTorch CPU inferencer: the training network with the shipped weights (weights_only load)."""
from __future__ import annotations

import numpy as np
import torch

from .base import Inferencer
from .network import QualityNet


class PyTorchInferencer(Inferencer):
    BACKEND_NAME = "pytorch"

    PRECISIONS = {"fp32": "pytorch"}

    def __init__(self, spec, *, threads=None, precision="fp32", mode="latency"):
        super().__init__(spec, threads=threads, precision=precision, mode=mode)
        if threads:
            torch.set_num_threads(int(threads))
        state = torch.load(spec.path("pytorch"), weights_only=True, map_location="cpu")
        self._net = QualityNet()
        self._net.load_state_dict(state)
        self._net.eval()

    def infer(self, views: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(views)).permute(0, 3, 1, 2).float()
            return self._net(x).numpy().astype(np.float32)

    def close(self) -> None:
        self._net = None
