"""A stand-in for PyNvVideoCodec, for machines without an NVIDIA GPU (CI).

It has the few names ``vqa.decode.nvdec`` uses, and behaves as NVDEC does where that matters
to the reader: it parses Annex B packets (FFmpeg's software decoder does the decoding), hands
out NV12 pictures in host memory by address, with the timestamp of the packet that carried
them, holds pictures back until later packets or the end of the stream, and reuses its
picture buffers on the next call, so a reader that does not copy at once reads garbage. After
the end of a stream (an empty packet) it decodes a new one, as the device tests check NVDEC does,
but not one of larger pictures than its first: the Video Codec SDK's decoder sizes itself for
its first stream unless given a maximum (``maxwidth``, ``maxheight``), and real 720p clips
after 640x360 ones decoded nothing on an H100.

``install()`` puts it in ``sys.modules`` as ``PyNvVideoCodec``; ``FAULTS`` switches on the
failures the tests need.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
import sys
import types

import av
import numpy as np

FAULTS: dict[str, bool] = {"create": False, "decode": False, "pixels": False}
STATS = {"created": 0, "packets": 0, "drained": 0}


class cudaVideoCodec:  # noqa: N801 (PyNvVideoCodec's name)
    H264 = "h264"
    HEVC = "hevc"


class PacketData:
    def __init__(self) -> None:
        self.bsl_data = 0
        self.bsl = 0
        self.pts = 0


class _Picture:
    def __init__(self, nv12: np.ndarray, pts: int) -> None:
        self._nv12, self._pts = nv12, pts

    def framesize(self) -> int:
        return self._nv12.size

    def GetPtrToPlane(self, plane: int) -> int:  # noqa: N802
        return self._nv12.ctypes.data

    def getPTS(self) -> int:  # noqa: N802
        return self._pts


def _nv12(frame: av.VideoFrame) -> np.ndarray:
    yuv = frame.to_ndarray(format="yuv420p").reshape(-1)
    w, h = frame.width, frame.height
    out = np.empty(w * h * 3 // 2, np.uint8)
    out[:w * h] = yuv[:w * h]
    out[w * h::2] = yuv[w * h:w * h + w * h // 4]
    out[w * h + 1::2] = yuv[w * h + w * h // 4:]
    if FAULTS["pixels"]:
        out[0] ^= 0xFF
    return out


class _Decoder:
    def __init__(self, codec: str) -> None:
        self._ctx = av.CodecContext.create(codec, "r")
        self._held: list[np.ndarray] = []
        self._max: tuple[int, int] | None = None  # the first stream's picture size

    def Decode(self, packet: PacketData) -> list[_Picture]:  # noqa: N802
        for buf in self._held:  # NVDEC's surfaces are reused: what was not copied is gone
            buf.fill(0x5A)
        if FAULTS["decode"]:
            raise RuntimeError("fake NVDEC: decode failed")
        if packet.bsl:
            STATS["packets"] += 1
            p = av.Packet(ctypes.string_at(packet.bsl_data, packet.bsl))
            p.pts = packet.pts
            frames = self._ctx.decode(p)
        else:  # end of stream: what is held comes out, and the decoder takes a new stream after
            STATS["drained"] += 1
            frames = self._ctx.decode(None)
            self._ctx.flush_buffers()
        for f in frames:
            self._max = self._max or (f.width, f.height)
            if f.width > self._max[0] or f.height > self._max[1]:
                raise RuntimeError("fake NVDEC: pictures larger than the decoder's first stream")
        self._held = [_nv12(f) for f in frames]
        return [_Picture(buf, f.pts) for buf, f in zip(self._held, frames)]


def CreateDecoder(gpuid: int = 0, codec: str = "h264", cudacontext: int = 0, cudastream: int = 0,  # noqa: N802
                  usedevicememory: bool = True) -> _Decoder:
    if FAULTS["create"]:
        raise RuntimeError("fake NVDEC: no free decode session")
    assert usedevicememory is False, "the reader wants pictures in host memory"
    STATS["created"] += 1
    return _Decoder(codec)


def install() -> types.ModuleType:
    module = types.ModuleType("PyNvVideoCodec")
    module.__spec__ = importlib.machinery.ModuleSpec("PyNvVideoCodec", None)
    for name in ("cudaVideoCodec", "PacketData", "CreateDecoder"):
        setattr(module, name, globals()[name])
    sys.modules["PyNvVideoCodec"] = module
    return module
