"""NVDEC with the pictures left on the GPU: the reader of the GPU engine (vqa.engine.gpu).

The nvdec reader (vqa.decode.nvdec) copies every picture back to host memory so that swscale
and the CPU path prepare it. This one hands each picture on as an NV12 tensor in device
memory, for ``vqa.infer.nv12`` to prepare beside the network; nothing but one picture per
video (the first, compared with FFmpeg's) comes back to the host. PyAV still opens, checks,
measures, demuxes and seeks the file as for every backend, so the plan reads the same frames.

A video whose pictures the GPU path cannot prepare as the CPU path does is decoded on the CPU
by FFmpeg instead, with a ``W_DECODER_FALLBACK`` warning naming the reason: the nvdec reader's
reasons (codec, pixel format, odd size, non-square pixels, AVI, ...) and those of the
preparation: a colour space other than BT.601 and BT.709, full range, rotation, interlacing,
HDR, a frame smaller than the model's view. Its frames are then ordinary RGB ``Frame``s.

Decoders are kept per thread (``Session``) and picture size from one video to the next: a new
NVDEC decoder costs about 30 ms, an emptied one nothing.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, cast

import av
import numpy as np
import torch
from av.bitstream import BitStreamFilterContext

from vqa.decode.hdr import HDR_TRANSFERS
from vqa.decode.nvdec import NO_PTS, CODECS, NvdecReader, drain, nvc
from vqa.infer.nv12 import matrix_of, nv12_of, unsupported
from vqa.preprocess import TRAINING, Geometry
from vqa.types import Frame

# Decoders are made one at a time: NVDEC.md (shared/gpu) saw decoders made at once in several
# threads hang; made in turn they work.
_CREATE = threading.Lock()


@dataclasses.dataclass
class DeviceFrame:
    """A frame as the GPU path reads it: NV12 (H * 3 / 2, W) uint8 on the device, its matrix."""

    run: int
    pts_s: float
    nv12: torch.Tensor
    matrix: str


@dataclasses.dataclass
class _Picture:
    """A decoded picture in device memory, copied out of NVDEC's buffer (which it reuses)."""

    pts: int | None
    nv12: torch.Tensor


class Session:
    """One thread's NVDEC decoders, kept from video to video; ``device``: where pictures go (CPU
    tensors with the stand-in decoder of the tests). ``network``: the CUDA stream the session's
    videos are prepared and scored on; ``stream``: the one NVDEC writes its pictures on and ours
    are copied out on, apart, so that waiting for a copy (before the decoder reuses its buffer)
    does not wait for the network.

    A decoder is kept for its codec and picture size: the Video Codec SDK's decoder sizes itself
    for its first stream unless given a maximum (a 640x360 decoder given a 1280x720 video decoded
    nothing on an H100), so a video of another size gets its own."""

    KEEP = 4  # decoders kept a session, the least recently used dropped first

    def __init__(self, device: torch.device | str = "cuda"):
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        self.network = torch.cuda.Stream(self.device) if cuda else None
        self.stream = torch.cuda.Stream(self.device) if cuda else None
        self._decoders: dict[tuple[str, int, int], Any] = {}  # in order of use

    def decoder(self, codec: str, size: tuple[int, int]) -> Any:
        found = self._decoders.pop((codec, *size), None)
        if found is not None:
            return found
        with _CREATE:
            made = nvc.CreateDecoder(gpuid=0, codec=getattr(nvc.cudaVideoCodec, CODECS[codec][0]), cudacontext=0,
                                     cudastream=0 if self.stream is None else self.stream.cuda_stream,
                                     usedevicememory=self.device.type == "cuda")
        return made

    def give_back(self, codec: str, size: tuple[int, int], decoder: Any) -> None:
        """A decoder emptied by the end of a stream, for the next video of this codec and size."""
        self._decoders[(codec, *size)] = decoder
        while len(self._decoders) > self.KEEP:
            del self._decoders[next(iter(self._decoders))]


class _CudaArray:
    """NVDEC's picture buffer as torch takes it through the CUDA array interface: a view, as
    DLPack's, without an export and a release for every picture."""

    def __init__(self, pointer: int, shape: tuple[int, ...]):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "|u1", "data": (pointer, False),
                                         "version": 3, "strides": None}


class NvdecDeviceReader(NvdecReader):
    BACKEND_NAME = "nvdec"

    def __init__(self, path: str, *, session: Session, geometry: Geometry = TRAINING, **kwargs: Any):
        self._session, self._geometry = session, geometry
        self.matrix: str | None = None  # the frames' matrix (vqa.infer.nv12), None on the CPU path
        super().__init__(path, **kwargs)

    def _why_not(self) -> str | None:
        reason = super()._why_not()
        if reason is not None:
            return reason
        first = self._ready[0]
        if self._rot_k:
            return "the GPU path does not turn rotated video"
        if first.interlaced_frame:
            return "the GPU path does not deinterlace"
        if first.color_trc in HDR_TRANSFERS:
            return "the GPU path does not tone-map HDR"
        why = unsupported(first.height, first.width, self._geometry, first.colorspace, first.color_range == 2)
        return None if why is None else f"the GPU path does not prepare this video ({why})"

    def _new_decoder(self) -> Any:
        self._fed = False
        self._layout: tuple[tuple[int, ...], int] | bool | None = None  # see _surface
        return self._session.decoder(self._stream.codec_context.name, self._shape)

    def _start(self) -> str | None:
        first = self._ready[0]
        self._shape = (first.height, first.width)
        self.matrix = matrix_of(first.colorspace)
        try:
            self._nv = self._new_decoder()
            self._bsf = BitStreamFilterContext(CODECS[self._stream.codec_context.name][1], in_stream=self._stream)
            self._reopen()
            frame = self._next_av_frame()
        except MemoryError:
            raise
        except Exception as exc:  # PyNvVideoCodec raises its own types, RuntimeError among them
            self._nv = None  # a decoder that failed is not kept
            return f"NVDEC could not start ({type(exc).__name__}: {exc})"
        if frame is None:
            return "NVDEC decoded no picture from the first packets"
        picture = cast(_Picture, frame)  # what _to_frame made of NVDEC's picture
        if picture.pts != first.pts or not np.array_equal(picture.nv12.cpu().numpy(), nv12_of(first)):
            return f"NVDEC's first picture differs from FFmpeg's (pts {frame.pts} against {first.pts})"
        self._ready.append(frame)
        return None

    def _fall_back(self, reason: str) -> None:
        # The decoder is dropped, not kept for the session: one that failed on this video's first
        # packets could fail every later video too.
        self.matrix = None
        super()._fall_back(reason)

    def _to_frame(self, picture: Any) -> _Picture:  # type: ignore[override]
        h, w = self._shape
        stream, network = self._session.stream, self._session.network
        if stream is not None and network is not None:  # copied on the NVDEC stream; _nv_decode waits for it
            with torch.cuda.stream(stream):
                nv12 = _packed(self._surface(picture), h, w)
            nv12.record_stream(network)  # read there: its memory is not reused before
        else:  # the stand-in decoder of the tests: host memory
            import ctypes
            size = w * h * 3 // 2
            if picture.framesize() != size:
                raise ValueError(f"a {picture.framesize()}-byte picture where {w}x{h} NV12 takes {size}")
            host = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(picture.GetPtrToPlane(0)))
            nv12 = torch.from_numpy(host.reshape(h * 3 // 2, w).copy())
        pts = int(picture.getPTS())
        return _Picture(None if pts == NO_PTS or pts >= 1 << 63 else pts, nv12)

    def _surface(self, picture: Any) -> torch.Tensor:
        """NVDEC's buffer holding ``picture``, viewed in place. The first picture of a decoder goes
        through DLPack, which tells the buffer's layout; the later ones of the same size through
        the CUDA array interface with that layout (DLPack again if the size or pointer disagree)."""
        layout = self._layout
        if isinstance(layout, tuple):
            shape, size = layout
            if picture.framesize() == size:
                return torch.as_tensor(_CudaArray(picture.GetPtrToPlane(0), shape), device=self._session.device)
            return torch.from_dlpack(picture)
        surface = torch.from_dlpack(picture)
        if layout is None:  # learnt once; False: DLPack for every picture
            same = surface.is_contiguous() and surface.data_ptr() == picture.GetPtrToPlane(0)
            self._layout = (tuple(surface.shape), picture.framesize()) if same else False
        return surface

    def _nv_decode(self, packet: av.Packet | None) -> list[av.VideoFrame]:
        pictures = super()._nv_decode(packet)
        if pictures and self._session.stream is not None:
            # NVDEC writes its next pictures into the buffers just copied: the copies must be
            # done before the decoder is called again (one wait a packet, the GIL let go).
            self._session.stream.synchronize()
        return pictures

    def _retrieve(self) -> np.ndarray | torch.Tensor | None:  # type: ignore[override]
        frame = self._frame
        if isinstance(frame, _Picture):
            return frame.nv12
        return super()._retrieve()

    def _note_shape(self, rgb: np.ndarray | torch.Tensor, pts: float) -> None:
        if isinstance(rgb, torch.Tensor):  # NV12: the picture's rows are 3/2 of its height
            rgb = np.empty((rgb.shape[0] * 2 // 3, rgb.shape[1], 0), np.uint8)
        super()._note_shape(rgb, pts)

    def _frame_of(self, run: int, pts_s: float,  # type: ignore[override]
                  pixels: np.ndarray | torch.Tensor) -> Frame | DeviceFrame:
        if isinstance(pixels, torch.Tensor):
            assert self.matrix is not None  # set when NVDEC started, cleared when it falls back
            return DeviceFrame(run, pts_s, pixels, self.matrix)
        return super()._frame_of(run, pts_s, pixels)

    def _give_back(self, decoder: Any) -> None:
        """Empty ``decoder`` (the end of a stream) and keep it for the session's next video."""
        try:
            if self._fed:
                drain(decoder)
            self._session.give_back(self._stream.codec_context.name, self._shape, decoder)
        except MemoryError:
            raise
        except Exception:  # noqa: BLE001 - a decoder that fails to empty is dropped, not kept
            pass

    def _release(self) -> None:
        decoder, self._nv = self._nv, None
        if decoder is not None and getattr(self, "_stream", None) is not None:
            self._give_back(decoder)
        super()._release()


def _packed(surface: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(H * 3 / 2, W) NV12 copied out of NVDEC's buffer, which may hold more rows than the picture
    (its surfaces are allocated in whole macroblocks, 544 rows for 540): luma from the top, chroma
    from where the luma rows allocated end. The first picture's check against FFmpeg's proves it."""
    rows, width = surface.shape[0], surface.shape[1]
    if width < w or rows * 2 % 3 or rows * 2 // 3 < h:
        raise ValueError(f"a {rows}x{width} NVDEC buffer cannot hold a {w}x{h} NV12 picture")
    if rows == h * 3 // 2 and width == w:
        return surface.clone()
    luma_rows = rows * 2 // 3
    return torch.cat([surface[:h, :w], surface[luma_rows:luma_rows + h // 2, :w]])

