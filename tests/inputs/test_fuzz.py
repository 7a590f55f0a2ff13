"""Mutated videos, seeded: bit flips, overwritten chunks, cuts and scribbled headers over clips in
five containers. Whatever the bytes, each file gets one record with a stable code, never
E_INTERNAL (a bug), and the batch ends within its deadline.

The handcrafted cases are in test_hostile.py; this finds the ones nobody thought of (the
non-UTF-8 tag and the unknown codec id there came from a run of this).
"""
from __future__ import annotations

import os
import random
import threading

import av
import pytest
from tests.support.clips import textured_frames

from vqa import Scorer

pytestmark = pytest.mark.slow

# Seed 2 has the mutant whose MPEG-TS grows a stream mid-file (PyAV raised IndexError).
SEEDS = [int(os.environ["VQA_TEST_SEED"])] if "VQA_TEST_SEED" in os.environ else [2, 7]
PER_CONTAINER = 16
DEADLINE_S = 180
# container -> (encoder, pixel format)
SOURCES = {"mp4": ("libx264", "yuv420p"), "mkv": ("libx264", "yuv420p"), "webm": ("libvpx-vp9", "yuv420p"),
           "ts": ("libx264", "yuv420p"), "avi": ("mpeg4", "yuv420p")}
STABLE_CODES = {"E_NOT_VIDEO", "E_NO_VIDEO_STREAM", "E_DECODE", "E_TOO_MANY_PIXELS", "E_EMPTY",
                "E_TIMEOUT", "E_MEMORY_LIMIT"}


def encode(path: str, codec: str, pix_fmt: str) -> bytes:
    with av.open(path, mode="w") as container:
        stream = container.add_stream(codec, rate=25, options={"g": "10"})
        stream.width, stream.height, stream.pix_fmt = 96, 64, pix_fmt
        for rgb in textured_frames(30, 64, 96):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())
    with open(path, "rb") as f:
        return f.read()


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    b = bytearray(data)
    how = rng.choice(["flip", "chunk", "cut", "header"])
    if how == "flip":
        for _ in range(rng.randint(1, 50)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif how == "chunk":
        i = rng.randrange(len(b))
        n = min(rng.randint(1, 2048), len(b) - i)
        b[i:i + n] = rng.randbytes(n)
    elif how == "cut":
        b = b[:rng.randrange(1, len(b))]
    else:  # the container's header: where parsers trust lengths and ids most
        for _ in range(rng.randint(1, 20)):
            b[rng.randrange(min(len(b), 1024))] = rng.randrange(256)
    return how, bytes(b)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("fuzz_sources")
    return {ext: encode(str(folder / f"source.{ext}"), codec, pix_fmt) for ext, (codec, pix_fmt) in SOURCES.items()}


@pytest.fixture(params=SEEDS, ids=lambda s: f"seed{s}")
def mutants(request, sources, tmp_path) -> tuple[int, list[str]]:
    seed, folder = request.param, tmp_path
    rng = random.Random(seed)
    paths = []
    for ext, data in sources.items():
        for k in range(PER_CONTAINER):
            how, bad = mutate(data, rng)
            path = folder / f"{ext}_{k:02d}_{how}.{ext}"
            path.write_bytes(bad)
            paths.append(str(path))
    return seed, paths


def test_mutated_files_get_stable_codes(mutants, validate_record):
    seed, paths = mutants
    records, failure = [], []

    def run():
        try:
            with Scorer(workers=2, threads=2) as s:
                records.extend(s.score_many(paths))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failure.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    assert not worker.is_alive(), f"seed {seed}: fuzz batch still running after {DEADLINE_S} s"
    if failure:
        raise failure[0]
    assert [r.path for r in records] == paths
    bugs = [(r.path, r.error) for r in records if not r.ok and r.error["code"] not in STABLE_CODES]
    assert not bugs, f"seed {seed}: {bugs}"
    for r in records:
        validate_record(r)
    ok = sum(r.ok for r in records)
    print(f"seed {seed}: {ok} of {len(records)} mutants scored, the rest refused with stable codes")
