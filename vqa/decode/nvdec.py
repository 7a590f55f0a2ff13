"""GPU decode backend: NVDEC (NVIDIA's hardware decoder, through PyNvVideoCodec) behind PyAV.

Only the decoding of compressed packets moves to the GPU. PyAV opens, checks, demuxes and
seeks the file as the pyav backend does (the same whitelists, caps, length measure, keyframe
rule and plan reading), and the pictures come back to host memory, are laid out as FFmpeg's
yuv420p frames and go through the same swscale conversion to RGB. H.264 and HEVC decoding is
exact, so the pixels, and the records, are the pyav backend's; each video's first picture is
compared with FFmpeg's before NVDEC takes over.

A video is decoded on the CPU by PyAV instead, with a ``W_DECODER_FALLBACK`` warning, where
NVDEC does not apply or cannot start: codecs other than H.264 and HEVC, pixel formats other
than 8-bit 4:2:0 (``yuv420p``), odd frame sizes, AVI (its timestamps are decode order), a
first picture without a timestamp, a decoder that fails to start (no free session, a size the
hardware refuses, CUDA unable to start under a worker's address-space limit), or a first
picture that differs from FFmpeg's.
"""
from __future__ import annotations

import ctypes
from typing import Any, ClassVar

import av
import numpy as np
from av.bitstream import BitStreamFilterContext

try:
    import PyNvVideoCodec as nvc
except ImportError:
    raise
except Exception as exc:  # its import asks the driver for its version: no driver, no GPU
    raise ImportError(f"PyNvVideoCodec does not load here ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc

from vqa.codes import WarningCode
from vqa.decode.pyav import PyAVReader
from vqa.types import VideoInfo

# FFmpeg codec name -> (NVDEC's codec, the filter that turns MP4/MKV packets into the Annex B
# stream NVDEC parses; it passes MPEG-TS packets, Annex B already, through unchanged).
CODECS = {"h264": ("H264", "h264_mp4toannexb"), "hevc": ("HEVC", "hevc_mp4toannexb")}
PIXEL_FORMATS = ("yuv420p",)
# A timestamp NVDEC hands back for a packet that had none (then the frame rate's clock is used).
NO_PTS = -1


class NvdecReader(PyAVReader):
    BACKEND_NAME: ClassVar[str] = "nvdec"
    # DROPS_BEFORE_RUNS stays True although NVDEC decodes every packet it is given: after a seek
    # it, like FFmpeg, skips pictures that cannot be decoded from there (HEVC's leading pictures
    # after an open-GOP keyframe), so no frame interval may span the way to a run (the H200 run
    # raised W_VARIABLE_FPS on such a clip when this was False).

    # The PyAV reader's drain at the end of a run asks FFmpeg's decoder for the frames it holds;
    # NVDEC holds its own, so this reader reads on instead (a video that falls back drains again).
    _drains = False
    _nv: Any = None  # the NVDEC decoder; None: PyAV decodes this video
    _bsf: BitStreamFilterContext | None = None
    _fed = False  # packets went in since the decoder was made: a seek must start a new one

    def _open(self) -> VideoInfo:
        info = super()._open()  # PyAV: the checks, the length, the first picture (on the CPU)
        errors = self.decode_errors
        reason = self._why_not() or self._start()
        if reason is not None:
            self.decode_errors = errors  # NVDEC's failures are the fallback's reason, not corrupt frames
            self._fall_back(reason)
        return info

    def _why_not(self) -> str | None:
        """Why NVDEC does not apply to this video, told from PyAV's first picture; None if it does."""
        first = self._ready[0]
        codec = self._stream.codec_context.name
        if codec not in CODECS:
            return f"NVDEC is used for {' and '.join(CODECS)}, not {codec}"
        if first.format.name not in PIXEL_FORMATS:
            return f"NVDEC is used for {', '.join(PIXEL_FORMATS)} pictures, not {first.format.name}"
        if first.width % 2 or first.height % 2:
            return f"NVDEC is not used for an odd frame size ({first.width}x{first.height})"
        if self._relabel:
            return "NVDEC is not used for AVI, whose timestamps are in decode order"
        if first.pts is None:
            return "the first picture has no timestamp"
        return None

    def _start(self) -> str | None:
        """Start NVDEC, decode the first picture again with it and compare; None when it matches."""
        first = self._ready[0]
        self._shape = (first.height, first.width)
        self._colour = (first.colorspace, first.color_range)
        try:
            self._nv = self._new_decoder()
            self._bsf = BitStreamFilterContext(CODECS[self._stream.codec_context.name][1], in_stream=self._stream)
            self._reopen()  # from the start again, through NVDEC
            frame = self._next_av_frame()
        except MemoryError:
            raise
        except Exception as exc:  # PyNvVideoCodec raises its own types, RuntimeError among them
            return f"NVDEC could not start ({type(exc).__name__}: {exc})"
        if frame is None:
            return "NVDEC decoded no picture from the first packets"
        if frame.pts != first.pts or not np.array_equal(frame.to_ndarray(), first.to_ndarray()):
            return f"NVDEC's first picture differs from FFmpeg's (pts {frame.pts} against {first.pts})"
        self._ready.append(frame)
        return None

    def _fall_back(self, reason: str) -> None:
        started = self._nv is not None
        self._nv = self._bsf = None
        self._drains = True
        self._warn(WarningCode.W_DECODER_FALLBACK, f"decoded on the CPU by FFmpeg: {reason}")
        if started:
            self._reopen()  # the packets NVDEC took are needed again

    def _new_decoder(self) -> Any:
        codec = getattr(nvc.cudaVideoCodec, CODECS[self._stream.codec_context.name][0])
        self._fed = False
        return nvc.CreateDecoder(gpuid=0, codec=codec, cudacontext=0, cudastream=0, usedevicememory=False)

    def _reset(self) -> None:
        super()._reset()
        if self._nv is not None and self._fed:
            # After a seek the decoder must forget the pictures it holds. Draining it (the end
            # of stream) does, at a fraction of a new decoder's cost (32 ms each on the H200).
            assert self._bsf is not None  # made with the decoder (_start), dropped with it
            self._bsf.flush()
            self._nv_decode(None)
            self._fed = False

    def _decode_packet(self, packet: av.Packet) -> list[av.VideoFrame]:
        if self._nv is None:
            return packet.decode()
        bsf = self._bsf
        assert bsf is not None  # made with the decoder (_start), dropped with it (_fall_back)
        try:
            frames: list[av.VideoFrame] = []
            if packet.size:
                for p in bsf.filter(packet):
                    frames += self._nv_decode(p)
            else:  # PyAV's flush packet at the end of the stream: drain the filter and NVDEC
                for p in bsf.filter(None):
                    frames += self._nv_decode(p)
                frames += self._nv_decode(None)
            return frames
        except MemoryError:
            raise
        except Exception as exc:  # counted as a packet that failed to decode, as FFmpeg's are
            raise ValueError(f"NVDEC: {type(exc).__name__}: {exc}") from exc

    def _nv_decode(self, packet: av.Packet | None) -> list[av.VideoFrame]:
        # Through memoryview: numpy's stub for Python 3.11 lists buffer types, not the protocol.
        data = None if packet is None else np.frombuffer(memoryview(packet), dtype=np.uint8)
        nv_packet = nvc.PacketData()
        if packet is not None and data is not None and data.size:
            nv_packet.bsl_data = data.ctypes.data  # ``data`` stays alive until Decode returns
            nv_packet.bsl = data.size
            pts = packet.pts if packet.pts is not None else packet.dts
            nv_packet.pts = NO_PTS if pts is None else int(pts)
        else:
            nv_packet.bsl = 0  # end of stream: NVDEC hands out what it holds
        self._fed = True
        return [self._to_frame(f) for f in self._nv.Decode(nv_packet)]

    def _to_frame(self, picture: Any) -> av.VideoFrame:
        """An NV12 picture in host memory as FFmpeg's yuv420p frame (copied: NVDEC reuses it)."""
        h, w = self._shape
        size = w * h * 3 // 2
        if picture.framesize() != size:
            raise ValueError(f"a {picture.framesize()}-byte picture where {w}x{h} NV12 takes {size}")
        nv12 = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(picture.GetPtrToPlane(0)))
        yuv = np.empty(size, np.uint8)
        yuv[:w * h] = nv12[:w * h]
        uv = nv12[w * h:].reshape(-1, 2)
        yuv[w * h:w * h + w * h // 4] = uv[:, 0]
        yuv[w * h + w * h // 4:] = uv[:, 1]
        frame = av.VideoFrame.from_ndarray(yuv.reshape(h * 3 // 2, w), format="yuv420p")
        frame.colorspace, frame.color_range = self._colour  # swscale converts as for FFmpeg's frame
        pts = int(picture.getPTS())
        frame.pts = None if pts == NO_PTS or pts >= 1 << 63 else pts
        frame.time_base = self._time_base
        return frame
