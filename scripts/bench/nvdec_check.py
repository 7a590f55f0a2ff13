"""NVDEC on the GPU machine: what PyNvVideoCodec offers, and how fast the nvdec reader decodes
every frame of a clip against PyAV, in one process and in several at once (issue 20).

    PYTHONPATH=$PWD python scripts/bench/nvdec_check.py CLIP --out nvdec_check.json [--procs 1 4 8 15]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time


def _decode_all(args) -> tuple[int, float, list[str]]:
    path, backend, threads = args
    from vqa.decode import open_video
    from vqa.sample import plan_frames

    start = time.perf_counter()
    with open_video(path, backend=backend, threads=threads) as reader:
        n = sum(1 for _ in reader.read(plan_frames(reader.info, "all")))
        return n, time.perf_counter() - start, list(reader.warnings)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("clip")
    ap.add_argument("--out", required=True)
    ap.add_argument("--procs", type=int, nargs="*", default=[1, 4, 8, 15])
    a = ap.parse_args()
    out: dict = {"clip": a.clip, "cores": os.cpu_count()}
    try:
        import PyNvVideoCodec as nvc
        out["pynvvideocodec"] = getattr(nvc, "__version__", "?")
        out["packetdata_attrs"] = [x for x in dir(nvc.PacketData()) if not x.startswith("_")]
        out["codecs"] = [x for x in dir(nvc.cudaVideoCodec) if not x.startswith("_")][:40]
        t = time.perf_counter()
        decs = [nvc.CreateDecoder(gpuid=0, codec=nvc.cudaVideoCodec.H264, cudacontext=0, cudastream=0,
                                  usedevicememory=False) for _ in range(10)]
        out["create_decoder_ms"] = round((time.perf_counter() - t) * 100, 2)
        out["decoder_attrs"] = [x for x in dir(decs[0]) if not x.startswith("_")]
        del decs
    except Exception as exc:
        out["probe_error"] = f"{type(exc).__name__}: {exc}"
    rows = {}
    for backend, threads in [("pyav", 1), ("nvdec", 1), ("pyav", 16)]:
        try:
            _decode_all((a.clip, backend, threads))  # warm: imports, CUDA context
            n, s, w = _decode_all((a.clip, backend, threads))
            rows[f"{backend} threads={threads}, 1 process"] = {"frames": n, "seconds": round(s, 3),
                                                               "frames_per_s": round(n / s, 1), "warnings": w}
        except Exception as exc:
            rows[f"{backend} threads={threads}, 1 process"] = {"error": f"{type(exc).__name__}: {exc}"}
    ctx = mp.get_context("spawn")
    for procs in a.procs:
        for backend in ("pyav", "nvdec"):
            try:
                with ctx.Pool(procs) as pool:
                    pool.map(_decode_all, [(a.clip, backend, 1)] * procs)  # warm every process
                    t = time.perf_counter()
                    res = pool.map(_decode_all, [(a.clip, backend, 1)] * (procs * 2))
                    s = time.perf_counter() - t
                n = sum(r[0] for r in res)
                rows[f"{backend}, {procs} processes"] = {"frames": n, "seconds": round(s, 3),
                                                         "frames_per_s": round(n / s, 1),
                                                         "warnings": sorted({x for r in res for x in r[2]})}
            except Exception as exc:
                rows[f"{backend}, {procs} processes"] = {"error": f"{type(exc).__name__}: {exc}"}
    out["decode_every_frame"] = rows
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
