"""The cuda backend, everything that needs no GPU: the bucket planning, the option table, and
E_BACKEND (never a crash) where no GPU or no CUDA build of torch is there. What needs a GPU
is in tests/infer/test_cuda_device.py and scripts/bench/gpu_check.py.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from tests.support.fakes import fail_backend_import, touch

import vqa.infer
from vqa import BackendUnavailable, Scorer, ScoreOptions, cli
from vqa.config import AUTO_BATCH_SIZE
from vqa.errors import UsageError
from vqa.infer import available_backends, open_inferencer, pick_backend
from vqa.infer.buckets import BUCKETS, bucket_for, fill_bucket, plan_chunks
from vqa.model import load_model_spec


# -- buckets: pure planning ----------------------------------------------------------------

@pytest.mark.parametrize("n", [*range(1, 140), 511, 512, 513, 1024, 1100, 5000])
def test_chunks_cover_every_view_once_each_in_the_smallest_bucket_that_holds_it(n):
    chunks = plan_chunks(n)
    assert chunks[0][0] == 0 and chunks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # contiguous, no overlap
    for start, stop, bucket in chunks:
        assert bucket in BUCKETS and stop - start <= bucket
        smaller = [b for b in BUCKETS if b < bucket]
        assert not smaller or stop - start > max(smaller)  # no smaller bucket would do
    assert len(chunks) == -(-n // max(BUCKETS))


def test_bucket_for_examples_and_custom_buckets():
    assert [bucket_for(n) for n in (1, 2, 8, 9, 32, 33, 128, 129, 512, 513)] == [1, 8, 8, 32, 32, 128, 128, 512,
                                                                                   512, 512]
    assert bucket_for(3, (16, 4)) == 4 and plan_chunks(20, (16, 4)) == [(0, 16, 16), (16, 20, 4)]
    with pytest.raises(ValueError):
        bucket_for(0)


def test_fill_bucket_copies_the_rows_and_zeroes_the_padding():
    rng = np.random.default_rng(0)
    views = rng.integers(1, 256, (5, 4, 4, 3), dtype=np.uint8)
    dst = np.full((8, 4, 4, 3), 77, np.uint8)  # what a previous, larger batch left there
    assert fill_bucket(dst, views) == 5
    assert np.array_equal(dst[:5], views) and not dst[5:].any()
    assert fill_bucket(dst, views[:0]) == 0 and not dst.any()
    with pytest.raises(ValueError, match="do not fit"):
        fill_bucket(dst[:4], views)


# -- the option table ----------------------------------------------------------------------

def test_help_lists_cuda_auto_fp16_and_bf16():
    out = " ".join(CliRunner().invoke(cli.cli, ["score", "--help"]).output.split())
    assert "[openvino|pytorch|cuda|auto]" in out and "[fp32|int8|fp16|bf16|auto]" in out


def test_cuda_is_in_the_backend_table_and_runs_fp32_and_fp16_from_the_pytorch_weights():
    assert vqa.infer.model_files("cuda", "fp32") == vqa.infer.model_files("pytorch", "fp32")
    assert vqa.infer.model_files("cuda", "fp16") == ("pytorch",)
    ScoreOptions(backend="cuda", precision="fp16").validate()
    for backend, precision in (("cuda", "int8"), ("openvino", "fp16"), ("pytorch", "fp16")):
        with pytest.raises(UsageError, match="runs precision"):
            ScoreOptions(backend=backend, precision=precision).validate()


@pytest.mark.parametrize("gpu", [False, True])
def test_auto_picks_cuda_only_where_a_gpu_answers(monkeypatch, gpu):
    monkeypatch.setattr(vqa.infer, "cuda_available", lambda: gpu)
    want = "cuda" if gpu else "openvino"
    assert pick_backend("auto") == want and pick_backend("pytorch") == "pytorch"
    options = ScoreOptions(backend="auto")
    assert options.backend == want  # decided once: the record names the backend that ran
    config = options.resolve(cores=2).record_config()
    assert config["backend"] == want
    assert config["batch_size"] == (32 if gpu else AUTO_BATCH_SIZE["throughput"])
    assert ("cuda" in available_backends()) is gpu


# -- E_BACKEND, never a crash ----------------------------------------------------------------

NO_GPU = {"cpu build": ("version.cuda", None, "CPU-only build"),
          "no device": ("cuda.is_available", lambda: False, "no CUDA device")}


def _no_gpu(monkeypatch, case):
    attr, value, _ = NO_GPU[case]
    if attr == "version.cuda":
        monkeypatch.setattr(torch.version, "cuda", None)
    else:
        monkeypatch.setattr(torch.version, "cuda", "12.8")
        monkeypatch.setattr(torch.cuda, "is_available", value)


@pytest.mark.parametrize("case", sorted(NO_GPU))
def test_library_without_a_gpu_is_backend_unavailable(monkeypatch, case):
    _no_gpu(monkeypatch, case)
    message = NO_GPU[case][2]
    with pytest.raises(BackendUnavailable, match=message) as info:
        open_inferencer(load_model_spec(), backend="cuda")
    assert info.value.code == "E_BACKEND" and "--backend openvino" in info.value.message
    with pytest.raises(BackendUnavailable, match=message):
        Scorer(backend="cuda", precision="fp16", workers=0)


@pytest.mark.parametrize("case, workers", [("cpu build", "0"), ("no device", "1")])
def test_cli_without_a_gpu_is_e_backend_and_exit_2(monkeypatch, tmp_path, case, workers):
    _no_gpu(monkeypatch, case)
    monkeypatch.delenv("VQA_DEBUG", raising=False)
    clip = touch(tmp_path / "a.mp4")
    result = CliRunner().invoke(cli.cli, ["score", str(clip), "--backend", "cuda", "--workers", workers])
    assert result.exit_code == 2, result.output
    assert "E_BACKEND" in result.output and NO_GPU[case][2] in result.output
    assert "Traceback" not in result.output


def test_a_torch_that_does_not_import_is_backend_unavailable_naming_torch(monkeypatch):
    fail_backend_import(monkeypatch, "vqa.infer.cuda", "libcudart.so.12: cannot open shared object file")
    with pytest.raises(BackendUnavailable, match="libcudart") as info:
        open_inferencer(load_model_spec(), backend="cuda")
    assert "CUDA build of torch" in info.value.message and "whl/cpu" not in info.value.message


def test_on_a_gpu_the_decode_workers_take_the_cores_inference_leaves():
    """Inference on the GPU needs one CPU thread (copies in, outputs out) that mostly waits:
    auto gives every core to decoding, and the starving-split warning judges against that plan."""
    from vqa.config import ScoreOptions

    gpu, cpu = ScoreOptions(backend="cuda").resolve(cores=16), ScoreOptions(backend="openvino").resolve(cores=16)
    assert (gpu.workers, gpu.threads) == (16, 1)
    assert (cpu.workers, cpu.threads) == (8, 8)
    assert ScoreOptions(backend="cuda", workers=15).resolve(cores=16).split_warning is None
    warning = ScoreOptions(backend="cuda", workers=4).resolve(cores=16).split_warning
    assert warning is not None and "auto would use --workers 16 --threads 1" in warning
    assert ScoreOptions(backend="cuda", threads=4).resolve(cores=16).workers == 12  # what the caller sets is kept


@pytest.mark.slow
def test_gpu_tests_collect_without_jsonschema_pyav_or_openvino():
    """The GPU machine lacks them: the conftest must import them only in the fixtures that use
    them, or tests/infer/test_cuda_device.py errors there before its first test."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, VQA_HIDE="jsonschema,av,openvino", PYTHONPATH=str(root))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "tests.support.hide_packages", "--collect-only", "tests/infer/test_cuda_device.py"],
                         cwd=root, env=env, capture_output=True, text=True, timeout=300)
    summary = run.stdout.strip().splitlines()[-1]  # e.g. "14 tests collected in 6.31s"; errors would be named
    assert run.returncode == 0 and re.fullmatch(r"\d+ tests collected in [\d.]+s", summary), run.stdout[:3000]


def test_speed_options_are_off_by_default_but_half_weights_and_an_unknown_one_is_refused_before_the_gpu_check():
    from vqa.infer.cuda import SPEED_OPTIONS, CUDAInferencer

    assert SPEED_OPTIONS == {"tf32": False, "channels_last": False, "cudnn_benchmark": False, "half_weights": True}
    with pytest.raises(TypeError, match="unknown cuda speed options"):
        CUDAInferencer(load_model_spec(), tf32_everywhere=True)
    if "cuda" not in available_backends():
        with pytest.raises(BackendUnavailable):
            CUDAInferencer(load_model_spec(), tf32=True, channels_last=True, cudnn_benchmark=True)


@pytest.mark.parametrize("backend, expected", [("cuda", "fp16"), ("openvino", "fp32"), ("pytorch", "fp32")])
def test_precision_auto_is_decided_with_the_backend_and_the_default_stays_fp32(backend, expected):
    options = ScoreOptions(backend=backend, precision="auto")
    assert options.precision == expected and ScoreOptions(backend=backend).precision == "fp32"
    assert options.replace(workers=1).precision == expected  # resolved once, kept by replace()


def test_precision_auto_follows_backend_auto(monkeypatch):
    monkeypatch.setattr(vqa.infer, "cuda_available", lambda: False)
    assert (ScoreOptions(backend="auto", precision="auto").backend, ScoreOptions(backend="auto", precision="auto")
            .precision) == ("openvino", "fp32")
    monkeypatch.setattr(vqa.infer, "cuda_available", lambda: True)
    assert (ScoreOptions(backend="auto", precision="auto").precision) == "fp16"


class _FakeCudart:
    def __init__(self, answer):
        self.answer, self.registered, self.unregistered = answer, [], []

    def cudaHostRegister(self, start, nbytes, flags):  # noqa: N802 - CUDA's name
        if isinstance(self.answer, BaseException):
            raise self.answer
        self.registered.append((start, nbytes))
        return self.answer

    def cudaHostUnregister(self, start):  # noqa: N802
        self.unregistered.append(start)
        return 0


@pytest.mark.parametrize("answer", [0, 2, RuntimeError("no binding")])
def test_pin_registers_the_ring_or_falls_back_to_staging(monkeypatch, answer):
    """``pin`` without a GPU (the CUDA calls faked): registered memory is read in place while
    pinned, rows elsewhere or after ``unpin`` are staged; a refusal (2: out of memory) or a
    torch without the binding leaves every row staged and never raises."""
    from types import SimpleNamespace

    from vqa.infer import cuda

    fake, drained = _FakeCudart(answer), []
    monkeypatch.setattr(torch.cuda, "cudart", lambda: fake)
    monkeypatch.setattr(cuda, "_drain_error", drained.append)
    gpu = SimpleNamespace(_pinned={}, _device="cuda:0")
    ring, other = np.zeros((3, 4, 100), np.uint8), np.zeros((4, 100), np.uint8)
    unpin = cuda.CUDAInferencer.pin(gpu, ring)
    is_pinned = lambda rows: cuda.CUDAInferencer._is_pinned(gpu, rows)  # noqa: E731
    assert is_pinned(ring[1]) == (answer == 0)
    assert not is_pinned(other)
    assert drained == ([] if answer == 0 else ["cuda:0"])
    unpin()
    assert not is_pinned(ring[1])
    assert fake.unregistered == ([ring.ctypes.data] if answer == 0 else [])
    unpin()  # twice is harmless
    assert len(fake.unregistered) <= 1
