"""GPU decode backend: NVDEC (NVIDIA's hardware decoder, through PyNvVideoCodec) behind PyAV.

Only the decoding of compressed packets moves to the GPU. PyAV opens, checks, demuxes and
seeks the file as the pyav backend does (the same whitelists, caps, length measure, keyframe
rule and plan reading), and the pictures come back to host memory, are laid out as FFmpeg's
yuv420p frames and go through the same swscale conversion to RGB. H.264 and HEVC decoding is
exact, so the pixels, and the records, are the pyav backend's; each video's first picture is
compared with FFmpeg's before NVDEC takes over.

A video is decoded on the CPU by PyAV instead, with a ``W_DECODER_FALLBACK`` warning, where
NVDEC does not apply or cannot start: codecs other than H.264 and HEVC, pixel formats other
than 8-bit 4:2:0 (``yuv420p``), odd frame sizes, non-square pixels, AVI (its timestamps are
decode order), a first picture without a timestamp, a decoder that fails to start (no free
session, a size the hardware refuses, CUDA unable to start under a worker's address-space
limit), or a first picture that differs from FFmpeg's.

FFmpeg's share is kept small: the file is opened without FFmpeg's stream probe (which decodes
frames on a thread per core), FFmpeg decodes the first keyframe alone for the comparison, and
on the way to a run NVDEC is not given the pictures no other refers to.
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
    # DROPS_BEFORE_RUNS: on the way to a run, the packets of pictures no other refers to are not
    # given to NVDEC (``_unreferenced``), as FFmpeg's skip_frame NONREF drops them. Besides, after
    # a seek NVDEC, like FFmpeg, skips pictures that cannot be decoded from there (HEVC's leading
    # pictures after an open-GOP keyframe), so no frame interval may span the way to a run.

    # The PyAV reader's drain at the end of a run asks FFmpeg's decoder for the frames it holds;
    # NVDEC holds its own, so this reader reads on instead (a video that falls back drains again).
    _drains = False
    _nv: Any = None  # the NVDEC decoder; None: PyAV decodes this video
    _bsf: BitStreamFilterContext | None = None
    _fed = False  # packets went in since the decoder was made: a seek must start a new one
    _probes = False  # FFmpeg decodes the first picture only, unless the video falls back
    KEYFRAMES_FROM_INDEX = True  # a few packets, not every one: the GPU engine's threads share one lock

    def _open(self) -> VideoInfo:
        info = super()._open()  # PyAV: the checks, the length, the first picture (on the CPU)
        errors = self.decode_errors
        reason = self._why_not() or self._start()
        if reason is not None:
            self.decode_errors = errors  # NVDEC's failures are the fallback's reason, not corrupt frames
            self._fall_back(reason)
        return info

    def _first_frame(self) -> av.VideoFrame | None:
        """FFmpeg's first picture, decoded from the first packet alone where it is a keyframe:
        the decoder is drained after it instead of being fed on until its reorder delay gives
        the picture out (two more packets with x264's B-frames, as much CPU again). FFmpeg's
        decoder goes no further: NVDEC, or a fresh FFmpeg open on fallback, reads from the start.
        Anything else (no keyframe first, a packet the decoder drops) is read as the pyav reader
        reads it."""
        try:
            packet = next(self._packets)
            if packet.is_keyframe and packet.size:
                ctx = self._stream.codec_context
                frames = ctx.decode(packet) + ctx.decode(None)
                if frames:
                    return frames[0]
        except MemoryError:
            raise
        except (av.error.FFmpegError, IndexError, ValueError, StopIteration):
            pass
        self._reopen()
        return super()._first_frame()

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
        if self._sar is not None:
            # swscale resamples them to square ones using the siting of the chroma samples that
            # FFmpeg's decoder puts on its frames and a frame made from NVDEC's picture lacks
            # (up to 10 levels apart on an H.264 clip with 4:3 pixels).
            return "NVDEC's pictures are not resampled as FFmpeg's are: non-square pixels"
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
        self._nv = self._bsf = None
        self._drains = True
        self._warn(WarningCode.W_DECODER_FALLBACK, f"decoded on the CPU by FFmpeg: {reason}")
        # From the start again (NVDEC may have taken packets), through FFmpeg's stream probe as
        # the pyav reader opens it: the same decoder parameters, so the same frames.
        self._probes = True
        self._reopen()

    def _new_decoder(self) -> Any:
        codec = getattr(nvc.cudaVideoCodec, CODECS[self._stream.codec_context.name][0])
        self._fed = False
        return nvc.CreateDecoder(gpuid=0, codec=codec, cudacontext=0, cudastream=0, usedevicememory=False)

    def _reset(self) -> None:
        super()._reset()
        if self._nv is not None and self._fed:
            # After a seek the decoder must forget the pictures it holds. Draining it (the end
            # of stream) does, at a fraction of a new decoder's cost (32 ms each on the H200);
            # the pictures it hands out are not wanted, so they are not copied.
            assert self._bsf is not None  # made with the decoder (_start), dropped with it
            self._bsf.flush()
            drain(self._nv)
            self._fed = False

    def _skip_if_before_run(self, packet: av.Packet) -> None:
        if self._nv is None:
            super()._skip_if_before_run(packet)
        else:  # _decode_packet leaves out what is not needed
            self._skipping = self._before_run(packet)

    def _decode_packet(self, packet: av.Packet) -> list[av.VideoFrame]:
        if self._nv is None:
            return packet.decode()
        bsf = self._bsf
        assert bsf is not None  # made with the decoder (_start), dropped with it (_fall_back)
        try:
            frames: list[av.VideoFrame] = []
            if packet.size:
                hevc = self._stream.codec_context.name == "hevc"
                for p in bsf.filter(packet):
                    if self._skipping and _unreferenced(bytes(p), hevc):
                        continue  # shows before the run and no picture refers to it
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


def drain(decoder: Any) -> None:
    """Empty an NVDEC decoder (the end of a stream), leaving the pictures it hands out unread."""
    packet = nvc.PacketData()
    packet.bsl = 0
    decoder.Decode(packet)


def _unreferenced(annexb: bytes, hevc: bool) -> bool:
    """Whether an Annex B access unit holds picture slices and no other picture refers to any of
    them: H.264 slices with nal_ref_idc 0; HEVC's sub-layer non-reference types (TRAIL_N,
    TSA_N, STSA_N, RADL_N, RASL_N), the rule FFmpeg's skip_frame NONREF follows."""
    slices = False
    i = annexb.find(b"\0\0\1")
    while 0 <= i < len(annexb) - 3:
        head = annexb[i + 3]
        if hevc:
            kind = head >> 1 & 0x3F
            if kind < 32:  # a picture's slice (VCL)
                if kind > 14 or kind % 2:  # referenced (_R), a keyframe type, or reserved
                    return False
                slices = True
        elif 1 <= head & 0x1F <= 5:  # a picture's slice or slice data
            if head & 0x60:  # nal_ref_idc: other pictures refer to it
                return False
            slices = True
        i = annexb.find(b"\0\0\1", i + 3)
    return slices
