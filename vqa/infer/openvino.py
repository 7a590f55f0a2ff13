"""OpenVINO CPU inferencer (the default): loads the IR that scripts/export.py wrote."""
from __future__ import annotations

import numpy as np
import openvino as ov

from .base import Inferencer


class OpenVINOInferencer(Inferencer):
    BACKEND_NAME = "openvino"

    PRECISIONS = {"fp32": "openvino", "int8": "openvino_int8"}  # -> manifest file key prefix

    def __init__(self, spec, *, threads=None, precision="fp32"):
        super().__init__(spec, threads=threads, precision=precision)
        key = self.PRECISIONS[precision]
        xml, _ = spec.path(f"{key}_xml"), spec.path(f"{key}_bin")
        config = {
            "PERFORMANCE_HINT": "LATENCY",
            # f32 everywhere: on CPUs with AMX or AVX512-BF16 OpenVINO would otherwise pick bf16,
            # and scores would depend on the machine.
            "INFERENCE_PRECISION_HINT": "f32",
        }
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        self._compiled = ov.Core().compile_model(str(xml), "CPU", config)
        self._request = self._compiled.create_infer_request()

    def infer(self, views: np.ndarray) -> np.ndarray:
        out = self._request.infer({0: np.ascontiguousarray(views)})
        return np.array(out[self._compiled.output(0)], dtype=np.float32)

    def close(self) -> None:
        self._request = self._compiled = None
