"""OpenVINO CPU inferencer (the default): loads the IR that scripts/model/export.py wrote."""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailable
from .base import Inferencer

# The model conversion API, which ``import openvino`` loads when it can: half of OpenVINO's
# import time, and its telemetry forks a process and starts a thread in the scorer (issue 18,
# start-up). A scorer loads IR and never converts.
_CONVERTER = "openvino.tools.ovc"


def _import_openvino():
    """``openvino`` without its conversion API (OpenVINO skips it when it cannot be imported);
    ``openvino.convert_model`` still loads it on first use, for a script that wants it."""
    if "openvino" not in sys.modules and _CONVERTER not in sys.modules:
        sys.modules[_CONVERTER] = None  # import fails: OpenVINO skips it
        try:
            import openvino
        finally:
            if sys.modules.get(_CONVERTER, 0) is None:
                del sys.modules[_CONVERTER]

        def convert_model_on_use(name: str):
            if name != "convert_model":
                raise AttributeError(f"module 'openvino' has no attribute {name!r}")
            from openvino.tools.ovc import convert_model

            openvino.convert_model = convert_model
            return convert_model

        if "convert_model" not in vars(openvino):
            openvino.__getattr__ = convert_model_on_use  # PEP 562
    import openvino

    return openvino


ov = _import_openvino()

ENV_CACHE_DIR = "VQA_CACHE_DIR"
WAIT_POLL_S = 0.002  # wait(): how often the jobs in flight are counted


def cache_dir() -> Path | None:
    """Where compiled models are kept so the next start skips compilation; None where there is
    no such place (no VQA_CACHE_DIR, XDG_CACHE_HOME nor HOME, and no home in the password
    database: an arbitrary container uid)."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "vqa"
    try:
        return Path.home() / ".cache" / "vqa"
    except RuntimeError:  # "Could not determine home directory."
        return None


def _compile(xml: str, config: dict, cache: Path | None):
    """The model compiled for the CPU, through the cache where it can be used: a read-only home,
    or a cache this user can neither read nor clean (another user's, a read-only volume), is
    passed by, and the model is compiled every time."""
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            core = ov.Core()
            core.set_property({"CACHE_DIR": str(cache)})
            return core.compile_model(xml, "CPU", config)
        except (OSError, RuntimeError):  # OpenVINO's file errors are RuntimeErrors
            pass
    return ov.Core().compile_model(xml, "CPU", config)


class OpenVINOInferencer(Inferencer):
    BACKEND_NAME = "openvino"
    PRECISIONS = {"fp32": "openvino", "int8": "openvino_int8", "bf16": "openvino"}  # -> manifest file key prefix

    def __init__(self, spec, *, threads=None, precision="fp32", mode="latency"):
        super().__init__(spec, threads=threads, precision=precision, mode=mode)
        key = self.PRECISIONS[precision]
        xml, _ = spec.path(f"{key}_xml"), spec.path(f"{key}_bin")
        config = {
            "PERFORMANCE_HINT": mode.upper(),
            # f32 unless bf16 is asked for: on CPUs with AMX or AVX512-BF16 OpenVINO would
            # otherwise pick bf16 itself, and scores would depend on the machine.
            "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
        }
        if threads:  # the Scorer always passes its share of the cores (vqa.threads)
            config["INFERENCE_NUM_THREADS"] = int(threads)
        # One folder per weights file: OpenVINO keys its cache on the model's path and size,
        # so new weights of the same shape at the same path would load the old blob.
        cache = cache_dir()
        if cache is not None:
            cache = cache / "openvino" / (spec.sha256[f"{key}_xml"][:8] + spec.sha256[f"{key}_bin"][:8])
        self._compiled = _compile(str(xml), config, cache)
        if precision == "bf16" and not _runs_bf16(self._compiled):
            # OpenVINO falls back to f32 where the CPU has no bfloat16 instructions: the
            # records would be fp32's under bf16's name.
            raise BackendUnavailable("precision bf16 needs a CPU with bfloat16 instructions (AVX512-BF16 or "
                                     "AMX), and this one has none: use fp32 or int8")
        self._request = self._compiled.create_infer_request()
        # Latency: one request at a time, all threads on it. Throughput: as many requests in
        # flight as OpenVINO's streams can take, so batches overlap.
        jobs = 1 if mode == "latency" else max(1, self._compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        self._count_lock = threading.Lock()
        self._in_flight = 0  # submitted, callback not yet returned
        self._queue = ov.AsyncInferQueue(self._compiled, jobs)
        self._queue.set_callback(self._callback)

    def infer(self, views: np.ndarray) -> np.ndarray:
        out = self._request.infer({0: np.ascontiguousarray(views)})
        return np.array(out[self._compiled.output(0)], dtype=np.float32)

    def _callback(self, request, userdata) -> None:
        done, _views = userdata  # the views were held until now: OpenVINO read them in place
        try:
            done(np.array(request.get_output_tensor(0).data, dtype=np.float32))
        finally:
            with self._count_lock:
                self._in_flight -= 1

    def submit(self, views, done) -> None:
        with self._count_lock:
            self._in_flight += 1
        try:
            # share_inputs: OpenVINO reads the array in place, after this returns. A copy made
            # here (views not contiguous) must live until then, so it travels with the request.
            views = np.ascontiguousarray(views)
            self._queue.start_async({0: views}, userdata=(done, views), share_inputs=True)
        except BaseException:
            with self._count_lock:
                self._in_flight -= 1
            raise

    def wait(self) -> None:
        # Counted and polled, with sleeps that let go of the GIL, not AsyncInferQueue.wait_all():
        # after Ctrl-C mid-job, wait_all in close() never returned in 1 run of 12 to 20 at load
        # average 3, although every callback had run (tests/engine/test_parallel.py's Ctrl-C test under
        # a faulthandler dump: the main thread in wait_all, OpenVINO's callback thread in no
        # Python frame).
        while self._in_flight > 0:
            time.sleep(WAIT_POLL_S)

    def close(self) -> None:
        if self._queue is not None:
            self.wait()
        self._queue = self._request = self._compiled = None


def _runs_bf16(compiled) -> bool:
    """True when the compiled model computes in bfloat16 (what OpenVINO settled on)."""
    return "bf" in str(compiled.get_property("INFERENCE_PRECISION_HINT")).lower()  # bf16, bfloat16
