"""The scoring options: one frozen dataclass, the one home of each option's default, choices,
bounds, command-line flag and help.

    ScoreOptions(...)          what a caller asked for ("auto" and None where it left the choice)
      .validate()              every check, once: UsageError / BackendUnavailable
      .record_config()         the ``config`` block of each record (and the job store's key): no cores
      .resolve(cores)          every "auto" and None decided -> Resolved: what runs where workers start

``vqa.cli`` makes its ``vqa score`` flags from the fields' metadata, ``Scorer``, ``RayScorer``,
``vqa bench`` and the folder job take a ``ScoreOptions``; none of them re-defaults or
re-checks an option.

>>> o = ScoreOptions(mode="latency", workers=2, threads=1)
>>> r = o.resolve(cores=4)
>>> r.batch_size, r.workers, r.threads, r.worker_memory_mb
(1, 2, 1, 4096)
>>> r.record_config()  # doctest: +NORMALIZE_WHITESPACE
{'sampling': 'default', 'backend': 'openvino', 'batch_size': 1, 'decoder': 'pyav',
 'precision': 'fp32', 'mode': 'latency'}
>>> ScoreOptions(batch_size=0).validate()
Traceback (most recent call last):
...
vqa.errors.UsageError: batch_size must be 'auto' or an integer in 1..256, got 0
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from . import decode
from .codes import ErrorCode
from .errors import BackendUnavailable, UsageError
from .infer import (AUTO_BACKEND, AUTO_PRECISION, BACKENDS, DEFAULT_BACKEND, DEFAULT_MODE, DEFAULT_PRECISION,
                    LIGHT_INFERENCE, MODES, PRECISIONS, pick_backend, pick_precision)
from .limits import MIN_WORKER_MEMORY_MB, auto_worker_memory_mb
from .sample import FRAME_MODES
from .threads import (MAX_WORKERS_PER_CORE, MIN_MAX_WORKERS, max_workers, plan_threads, starving_split,
                      usable_cores)
from .types import CONFIG_KEYS

MAX_BATCH_SIZE = 256
# batch_size="auto": measured with `vqa bench` on the 2-core machine (docs/history/performance.md).
# OpenVINO's views per second peak at batch 4 (fp32 212, int8 321 with the first INT8 model) and fall beyond it, while
# the time per batch keeps climbing; batch 1 answers each request soonest (6 ms).
AUTO_BATCH_SIZE = {"latency": 1, "throughput": 4}
# On a GPU a batch of 4 leaves it idle; 32 is one default-sampled video per batch and a
# CUDA graph bucket (vqa.infer.buckets). Larger batches pay off only with --frames all.
AUTO_BATCH_SIZE_BY_BACKEND = {"cuda": {"latency": 1, "throughput": 32}}
BACKEND_CHOICES = (*BACKENDS, AUTO_BACKEND)
PRECISION_CHOICES = (*PRECISIONS, AUTO_PRECISION)
# Backends whose inference runs off the CPU: the thread budget gives decoding the cores.
GPU_BACKENDS = frozenset({"cuda"})
ENGINES = ("local", "ray")  # open_scorer's engine="..." (vqa.scorer.by_engine)
DECODERS = tuple(decode.KNOWN_BACKENDS)
# Decoders whose workers get no address-space limit by default: CUDA reserves far more
# virtual memory at start-up (tens of GiB, never resident) than any useful RLIMIT_AS.
UNLIMITED_DECODERS = ("nvdec",)
# --nvdec-workers: NVDEC workers beside workers of the first decoder, whose pixels NVDEC's
# equal bit for bit (vqa.decode.nvdec): a record does not depend on which worker took the video.
HYBRID_DECODER = ("pyav", "nvdec")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- each option's check: None when the value is fine, else the message ---------------------

def _one_of(name: str, choices) -> Any:
    return lambda v: None if v in choices else f"unknown {name} {v!r}; choose one of {', '.join(choices)}"


def _check_frames(v: Any) -> str | None:
    if v in FRAME_MODES or (_is_int(v) and v >= 1):
        return None
    return f"frames must be 'default', 'all' or an integer >= 1, got {v!r}"


def _check_batch_size(v: Any) -> str | None:
    if v == "auto" or (_is_int(v) and 1 <= v <= MAX_BATCH_SIZE):
        return None
    return f"batch_size must be 'auto' or an integer in 1..{MAX_BATCH_SIZE}, got {v!r}"


def _check_workers(v: Any) -> str | None:
    if v is None or (_is_int(v) and v >= 0):
        return None
    return f"workers must be an integer >= 0 (0: decode in this process), got {v!r}"


def _check_threads(v: Any) -> str | None:
    return None if v is None or (_is_int(v) and v >= 1) else f"threads must be an integer >= 1, got {v!r}"


def _check_timeout(v: Any) -> str | None:
    if v in ("auto", None) or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               and v >= 0):
        return None
    return f"timeout_s must be 'auto', None or 0 (no limit), or seconds > 0, got {v!r}"


def _check_memory(v: Any) -> str | None:
    if v in ("auto", None, 0) or (_is_int(v) and v >= MIN_WORKER_MEMORY_MB):
        return None
    return (f"worker_memory_mb must be 'auto', None or 0 (no limit), or an integer >= "
            f"{MIN_WORKER_MEMORY_MB} (MiB), got {v!r}")


def _check_gpu_processes(v: Any) -> str | None:
    return None if v is None or (_is_int(v) and 1 <= v <= 16) else \
        f"gpu_processes must be an integer from 1 to 16 (or None: auto), got {v!r}"


# The GPU engine's processes by default: one per CORES_PER_GPU_PROCESS cores, at most
# MAX_AUTO_GPU_PROCESSES. On 16 cores and an H100, 4 processes scored a folder 2.8x faster than
# one and 1.2x faster than 8 (docs: Performance, the GPU engine).
CORES_PER_GPU_PROCESS = 4
MAX_AUTO_GPU_PROCESSES = 4


def _check_nvdec_workers(v: Any) -> str | None:
    return None if _is_int(v) and v >= 0 else f"nvdec_workers must be an integer >= 0, got {v!r}"


def _check_model_dir(v: Any) -> str | None:
    ok = v is None or isinstance(v, (str, os.PathLike))
    return None if ok else f"model_dir must be a path, got {v!r}"


def _check_timeline(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"timeline must be True or False, got {v!r}"


# -- each option's parser of command-line text (ValueError: the message) -----------------------

def _parse_frames(text: str) -> int | str:
    text = text.strip().lower()
    if text in FRAME_MODES:
        return text
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not 'default', 'all' or a whole number of frames") from None
    if n < 1:
        raise ValueError(f"frame count must be at least 1, got {n}")
    return n


def _parse_batch_size(text: str) -> int | str:
    text = text.strip().lower()
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not 'auto' or a whole number") from None
    if not 1 <= n <= MAX_BATCH_SIZE:
        raise ValueError(f"batch size must be in 1..{MAX_BATCH_SIZE}, got {n}")
    return n


def _parse_timeout(text: str) -> float | str | None:
    text = text.strip().lower()
    if text == "auto":
        return text
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not 'auto' or a number of seconds") from None
    if not seconds >= 0:  # also refuses nan
        raise ValueError(f"timeout must be >= 0 seconds (0: none), got {text}")
    return seconds or None


def _parse_memory(text: str) -> int | str | None:
    text = text.strip().lower()
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not 'auto' or a whole number of MiB") from None
    if n < 0:
        raise ValueError(f"{n} is not in the range x>=0")
    return n or None


def _parse_count(minimum: int):
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a valid integer") from None
        if n < minimum:
            raise ValueError(f"{n} is not in the range x>={minimum}")
        return n
    return parse


def _option(default: Any, check, *, flag: str | None = None, help: str = "", parse=None, choices=None,
            metavar: str | None = None, show_default: bool = False, existing_dir: bool = False) -> Any:
    """A field with its check and, for the command line, its flag, help and parser (``parse``:
    text -> value, ValueError with the message; ``choices``: a fixed list; neither: a flag for
    a bool, a folder that must exist for ``existing_dir``)."""
    return field(default=default, metadata={"check": check, "flag": flag, "help": help, "parse": parse,
                                            "choices": choices, "metavar": metavar,
                                            "show_default": show_default, "existing_dir": existing_dir})


@dataclass(frozen=True)
class ScoreOptions:
    """What to score with and how. Every field has its default here and nowhere else.

    Options that change records enter ``record_config()`` (so the job store's key); the others
    (workers, nvdec_workers, gpu_processes, threads, model_dir, timeout_s, worker_memory_mb) only change speed
    or isolation.
    """

    frames: int | str = _option(
        "default", _check_frames, flag="--frames", parse=_parse_frames, metavar="default|all|N",
        show_default=True, help="Frames to score: 'default' (the model's sampling plan), 'all' "
                                "(every frame, slow), or N frames spread over the video.")
    backend: str = _option(
        DEFAULT_BACKEND, _one_of("backend", BACKEND_CHOICES), flag="--backend", choices=BACKEND_CHOICES,
        show_default=True, help="Inference backend. pytorch needs torch, the CPU build: pip install "
                                "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu. cuda needs "
                                "an NVIDIA GPU and a CUDA build of torch (precision fp32 or fp16). auto: cuda "
                                "where a GPU answers, else openvino (decided when the options are made).")
    precision: str = _option(
        DEFAULT_PRECISION, _one_of("precision", PRECISION_CHOICES), flag="--precision", choices=PRECISION_CHOICES,
        show_default=True,
        help="Model precision. int8 (OpenVINO only) is the NNCF-quantized model: faster, "
             "scores close to fp32 (models/metrics.json has the measured distance). fp16 "
             "(cuda only) runs the fp32 weights cast to float16. bf16 (OpenVINO only) runs "
             "the fp32 model in bfloat16 on CPUs that have it (AVX512-BF16, AMX): faster, scores "
             "close to fp32 (docs: Performance has the measured distance); "
             f"{ErrorCode.E_BACKEND} elsewhere. auto: fp16 "
             "on cuda, fp32 elsewhere (decided with the backend).")
    decoder: str = _option(
        decode.DEFAULT_BACKEND, _one_of("decoder", DECODERS), flag="--decoder", choices=DECODERS,
        show_default=True, help="Video decoder. opencv has fewer safety controls; nvdec decodes H.264 and HEVC on "
             "an NVIDIA GPU, the rest on the CPU (docs: CLI).")
    batch_size: int | str = _option(
        "auto", _check_batch_size, flag="--batch-size", parse=_parse_batch_size, metavar="auto|N",
        show_default=True, help="Frames per inference batch, or 'auto': 1 with --mode latency, 4 with "
                                "--mode throughput (where views per second peak on a 2-core machine; see vqa bench), "
                                "32 with --backend cuda.")
    mode: str = _option(
        DEFAULT_MODE, _one_of("mode", MODES), flag="--mode", choices=MODES, show_default=True,
        help="What to optimise: the time to each video's result (latency) or videos per "
             "hour (throughput). Sets OpenVINO's performance hint and the auto batch size.")
    workers: int | None = _option(
        None, _check_workers, flag="--workers", parse=_parse_count(0), metavar="INTEGER RANGE",
        help="Decode worker processes (default: half the usable cores, at least 1, the rest "
             "for inference; with --backend cuda every core, beside one thread that feeds the GPU; "
             "0 decodes in this process, without the timeout and memory limit; at most 4 per usable "
             "core, or 16). With --decoder nvdec --backend cuda: the GPU engine's NVDEC sessions.")
    timeout_s: float | str | None = _option(
        "auto", _check_timeout, flag="--timeout", parse=_parse_timeout, metavar="auto|SECONDS",
        show_default=True, help="Wall-clock limit in seconds on each decode task of a video (the probe, each "
        "part split across workers; 0: none). Past it the worker is killed and replaced and "
        f"the video gets {ErrorCode.E_TIMEOUT}. auto: 120 s, more for long videos with --frames all.")
    worker_memory_mb: int | str | None = _option(
        "auto", _check_memory, flag="--worker-memory", parse=_parse_memory, metavar="auto|MIB",
        help="Address-space limit (RLIMIT_AS) per decode worker in MiB (0: none; default "
             "4096, none with --decoder nvdec). Less than a worker maps at start-up plus 256 MiB "
             f"(about 800 MiB) is refused before scoring (exit 2). Past it the video gets {ErrorCode.E_MEMORY_LIMIT}.")
    nvdec_workers: int = _option(
        0, _check_nvdec_workers, flag="--nvdec-workers", parse=_parse_count(0), metavar="INTEGER RANGE",
        help="Decode workers that decode on an NVIDIA GPU (NVDEC), added beside the CPU workers "
             "(--decoder pyav only; default 0). Each takes the next video like any worker; H.264 and "
             "HEVC are decoded by NVDEC, other videos by FFmpeg on the CPU. Records are those of pyav "
             "alone (docs: How it works has the one exception). Measured: no faster with every core decoding.")
    gpu_processes: int | None = _option(
        None, _check_gpu_processes, flag="--gpu-processes", parse=_parse_count(1), metavar="INTEGER RANGE",
        help="With --decoder nvdec and --backend cuda (the GPU engine: pictures decoded by NVDEC stay on the "
             "GPU): processes that share its --workers NVDEC sessions, each with its own copy of the model "
             f"(default: one per {CORES_PER_GPU_PROCESS} usable cores, at most {MAX_AUTO_GPU_PROCESSES}). The CPU's "
             "share of each video holds one process's interpreter lock; more processes spread it "
             "(docs: Performance has the measured rows).")
    model_dir: str | os.PathLike | None = _option(
        None, _check_model_dir, flag="--model-dir", existing_dir=True,
        help="Folder holding the model files and manifest (default: the installed model).")
    threads: int | None = _option(
        None, _check_threads, flag="--threads", parse=_parse_count(1), metavar="INTEGER RANGE",
        help="CPU threads for inference (default: the cores the workers leave, at least 1).")
    timeline: bool = _option(
        False, _check_timeline, flag="--timeline",
        help="Add each video's per-frame data to its record: time, score, each defect's "
             "probability, black and frozen flags (larger records; docs: Output contract).")

    def __post_init__(self) -> None:
        # "auto" is decided here, once, so records, the job store's key and every engine see
        # the backend that runs (a frozen dataclass: set through object.__setattr__).
        if self.backend == AUTO_BACKEND:
            object.__setattr__(self, "backend", pick_backend(AUTO_BACKEND))
        if self.precision == AUTO_PRECISION:  # after the backend: it depends on it
            object.__setattr__(self, "precision", pick_precision(self.backend, AUTO_PRECISION))

    def validate(self) -> ScoreOptions:
        """Raise UsageError for a value out of bounds or a mix that cannot work, and
        BackendUnavailable for a decoder whose package is missing; return self."""
        for f in fields(self):
            problem = f.metadata["check"](getattr(self, f.name))
            if problem is not None:
                raise UsageError(problem)
        precisions = BACKENDS[self.backend][3]
        if self.precision not in precisions:
            raise UsageError(f"backend {self.backend!r} runs precision {', '.join(precisions)}, "
                             f"not {self.precision!r}")
        if self.nvdec_workers and self.decoder != HYBRID_DECODER[0]:
            raise UsageError(f"nvdec_workers adds NVDEC workers beside {HYBRID_DECODER[0]} workers (their pixels "
                             f"are {HYBRID_DECODER[0]}'s), not beside {self.decoder!r} ones: use decoder "
                             f"{HYBRID_DECODER[0]!r}")
        if (self.gpu_processes or 1) > 1 and not (self.decoder == "nvdec" and self.backend in GPU_BACKENDS):
            raise UsageError("gpu_processes spreads the GPU engine (decoder 'nvdec' with backend 'cuda') over "
                             f"processes; with decoder {self.decoder!r} and backend {self.backend!r} there is none")
        if self.nvdec_workers and self.workers == 0:
            raise UsageError("nvdec_workers needs decode workers (workers >= 1): with workers=0 this "
                             "process decodes")
        # An error now, not E_BACKEND on every video. Found, not imported: the decode workers
        # import it (and say so at start-up if that fails), this process need not (issue 18).
        for decoder in (self.decoder, *(HYBRID_DECODER[1:] if self.nvdec_workers else ())):
            reason = decode.missing_package(decoder)
            if reason is not None:
                package = decode.KNOWN_BACKENDS[decoder]
                raise BackendUnavailable(f"decoder {decoder!r} needs the {package!r} package: pip install "
                                         f"{package} (import failed: {reason})")
        return self

    def resolve(self, cores: int | None = None) -> Resolved:
        """Validate, then decide every "auto" and None: the batch size from the mode, workers
        and threads from ``cores`` (default: the cores this process may use; vqa.threads),
        the memory limit from the workers. ``timeout_s="auto"`` stays: it is decided per
        video from its probe (vqa.limits.auto_timeout_s)."""
        self.validate()
        gpu = self.backend in GPU_BACKENDS
        light = (self.backend, self.precision) in LIGHT_INFERENCE
        import multiprocessing

        workers = self.workers
        if multiprocessing.current_process().daemon:  # a multiprocessing.Pool's worker may start no process
            if self.workers or self.nvdec_workers:
                raise UsageError("this is a daemonic process (a multiprocessing.Pool worker, say), which may not "
                                 "start decode workers: use workers=0, or leave workers to auto")
            workers = 0  # decode in this process
        cap = max_workers(cores)
        if (self.workers or 0) + self.nvdec_workers > cap:
            raise UsageError(f"{(self.workers or 0) + self.nvdec_workers} decode workers is more than this machine's "
                             f"limit of {cap} ({MAX_WORKERS_PER_CORE} per usable core, at least {MIN_MAX_WORKERS}): "
                             "each is a process of about 100 MiB, and decoding goes no faster than the cores; "
                             "use fewer, or leave --workers to auto")
        budget = plan_threads(workers=workers, inference_threads=self.threads, cores=cores, accelerator=gpu,
                              light_inference=light)
        memory = self.worker_memory_mb
        if memory == "auto" and self.decoder in UNLIMITED_DECODERS:
            memory = None
        return Resolved(
            options=self, batch_size=self._batch_size(),
            workers=budget.workers, threads=budget.inference_threads, decode_threads=budget.decode_threads,
            worker_memory_mb=auto_worker_memory_mb(budget.workers) if isinstance(memory, str) else memory or None,
            timeout_s=self.timeout_s or None, nvdec_workers=self.nvdec_workers,
            gpu_processes=self.gpu_processes or max(1, min(MAX_AUTO_GPU_PROCESSES,
                                                           (cores or usable_cores()) // CORES_PER_GPU_PROCESS)),
            split_warning=starving_split(budget, workers=self.workers, inference_threads=self.threads,
                                         accelerator=gpu, light_inference=light))

    def _batch_size(self) -> int:  # the backend's and the mode's: the same on every machine
        auto = AUTO_BATCH_SIZE_BY_BACKEND.get(self.backend, AUTO_BATCH_SIZE)[self.mode]
        return self.batch_size if isinstance(self.batch_size, int) else auto

    def record_config(self) -> dict[str, Any]:
        """Each record's ``config`` (vqa.types.CONFIG_KEYS; ``timeline`` only when on), after
        ``validate()``. No cores: a 2-core driver and 64-core nodes give the same block."""
        values = {"sampling": self.frames, "backend": self.backend, "batch_size": self._batch_size(),
                  "decoder": self.decoder, "precision": self.precision, "mode": self.mode,
                  "timeline": True if self.timeline else None}
        return {key: values[key] for key in CONFIG_KEYS if values[key] is not None}

    def replace(self, **changes: Any) -> ScoreOptions:
        values = asdict(self)
        values.update(changes)
        return ScoreOptions(**values)

    def to_kwargs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Resolved:
    """``ScoreOptions`` with every choice made: what an engine runs with."""

    options: ScoreOptions
    batch_size: int
    workers: int  # decode worker processes; 0: decode in this process
    threads: int  # inference threads
    decode_threads: int  # FFmpeg threads of an in-process decoder (workers=0)
    worker_memory_mb: int | None  # None: no limit
    timeout_s: float | str | None  # "auto" (per video), seconds, or None: no limit
    nvdec_workers: int = 0  # NVDEC decode workers beside ``workers`` (no address-space limit)
    gpu_processes: int = 1  # processes of the GPU engine (gpu_native), sharing ``workers`` sessions
    # An explicit --workers/--threads that starves decoding or inference (vqa.threads), said
    # once on stderr by `vqa score`; None when the split is auto or fine.
    split_warning: str | None = None

    @property
    def frames(self) -> int | str:
        return self.options.frames

    @property
    def decoder(self) -> str:
        return self.options.decoder

    @property
    def gpu_native(self) -> bool:
        """NVDEC sessions in this process feeding the GPU's own preparation (vqa.engine.gpu)
        rather than decode workers: ``--decoder nvdec`` with a GPU backend; ``workers`` counts them."""
        return self.options.decoder == "nvdec" and self.options.backend in GPU_BACKENDS and self.workers > 0

    @property
    def timeline(self) -> bool:
        return self.options.timeline

    def record_config(self) -> dict[str, Any]:  # ScoreOptions.record_config: the same on any cores
        return self.options.record_config()


def cli_fields() -> list:
    """The fields that are ``vqa score`` flags, in the order of the help."""
    return [f for f in fields(ScoreOptions) if f.metadata.get("flag")]
