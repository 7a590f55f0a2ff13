"""What handing one NVDEC picture to torch costs, step by step, on the GPU machine.

    PYTHONPATH=$PWD python scripts/bench/nvdec_handoff.py CLIP.mp4 handoff.json

One thread decodes the clip three times with a raw PyNvVideoCodec decoder (pictures in device
memory) and times, per picture: ``Decode`` itself, reading the timestamp, size and pointer,
``torch.from_dlpack`` and its clone and release, the same view through the CUDA array interface
and its clone and release, and the wait for the copies' stream after each packet. Twice: with
the GPU idle, then with another stream multiplying matrices meanwhile. It also checks, on the
first 50 pictures, that both views hold the same bytes at the same address.
"""
from __future__ import annotations

import json
import sys
import threading
import time

import av
import numpy as np
import PyNvVideoCodec as nvc
import torch
from av.bitstream import BitStreamFilterContext

STEPS = ("decode", "pts", "framesize", "ptr", "dlpack", "dlpack_clone", "dlpack_release", "cai", "cai_clone",
         "cai_release", "pictures_release", "sync")


class CudaArray:
    def __init__(self, pointer: int, rows: int, width: int):
        self.__cuda_array_interface__ = {"shape": (rows, width), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3, "strides": None}


def annexb_packets(path: str) -> tuple[list[tuple[np.ndarray, int | None]], int, int]:
    with av.open(path) as c:
        s = c.streams.video[0]
        bsf = BitStreamFilterContext("h264_mp4toannexb", in_stream=s)
        packets = [(np.frombuffer(memoryview(q), np.uint8).copy(), q.pts)
                   for packet in c.demux(s) for q in bsf.filter(packet if packet.size else None)]
        return packets, s.codec_context.height, s.codec_context.width


def busy_gpu(stop: threading.Event) -> None:
    a = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        while not stop.is_set():
            a @ a
            torch.cuda.current_stream().synchronize()


def run(label: str, packets, h: int, w: int, busy: bool = False) -> dict:
    dec = nvc.CreateDecoder(gpuid=0, codec=nvc.cudaVideoCodec.H264, cudacontext=0, cudastream=0, usedevicememory=True)
    stream = torch.cuda.Stream()
    spent = dict.fromkeys(STEPS, 0.0)
    n = same = 0
    stop = threading.Event()
    loader = threading.Thread(target=busy_gpu, args=(stop,))
    if busy:
        loader.start()
        time.sleep(0.2)
    shape: tuple[int, ...] = ()
    size = 0
    with torch.cuda.stream(stream):
        for _ in range(3):
            for buf, pts in [*packets, (None, 0)]:
                pd = nvc.PacketData()
                if buf is None:
                    pd.bsl = 0
                else:
                    pd.bsl_data, pd.bsl, pd.pts = buf.ctypes.data, buf.size, -1 if pts is None else pts
                t = time.perf_counter()
                pictures = dec.Decode(pd)
                spent["decode"] += time.perf_counter() - t
                for f in pictures:
                    t0 = time.perf_counter()
                    f.getPTS()
                    t1 = time.perf_counter()
                    size = f.framesize()
                    t2 = time.perf_counter()
                    ptr = f.GetPtrToPlane(0)
                    t3 = time.perf_counter()
                    z = torch.from_dlpack(f)
                    t4 = time.perf_counter()
                    a = z.clone()
                    t5 = time.perf_counter()
                    shape, at = tuple(z.shape), z.data_ptr()
                    del z
                    t6 = time.perf_counter()
                    y = torch.as_tensor(CudaArray(ptr, size // w, w), device="cuda")
                    t7 = time.perf_counter()
                    b = y.clone()
                    t8 = time.perf_counter()
                    del y
                    t9 = time.perf_counter()
                    for k, dt in zip(STEPS[1:-2], (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6,
                                                   t8 - t7, t9 - t8)):
                        spent[k] += dt
                    if n < 50:
                        torch.cuda.current_stream().synchronize()
                        same += int(shape == tuple(b.shape) and at == ptr and torch.equal(a, b))
                    n += 1
                t = time.perf_counter()
                del pictures
                spent["pictures_release"] += time.perf_counter() - t
                t = time.perf_counter()
                stream.synchronize()
                spent["sync"] += time.perf_counter() - t
    stop.set()
    if busy:
        loader.join()
    result = {"label": label, "pictures": n, "size": [h, w], "dlpack_shape": list(shape), "framesize": size,
              "cai_equals_dlpack_of_first_50": same,
              "ms_per_picture": {k: round(v / max(n, 1) * 1e3, 4) for k, v in spent.items()}}
    print(json.dumps(result), flush=True)
    return result


def main() -> int:
    packets, h, w = annexb_packets(sys.argv[1])
    results = [run("idle", packets, h, w), run("gpu busy", packets, h, w, busy=True)]
    with open(sys.argv[2], "w") as f:
        json.dump({"command": "python scripts/bench/nvdec_handoff.py " + " ".join(sys.argv[1:]), "results": results},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
