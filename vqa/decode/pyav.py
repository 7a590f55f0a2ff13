"""Default decode backend: PyAV (FFmpeg's libraries), exact timestamps and keyframe seeking.
Long because every defence below is FFmpeg-specific and belongs to this one reader.

Untrusted files are opened defensively:

- only FFmpeg's ``file`` protocol and only the demuxers in ``VIDEO_FORMATS``: a playlist
  (HLS ``.m3u8``), an ffconcat script or an image-sequence pattern is refused at open
  (E_NOT_VIDEO) and so can never make FFmpeg read the other files it names;
- the frame size is checked before any frame is allocated: a first open reads the headers
  with no decoder allowed (FFmpeg's probe would otherwise decode a frame of whatever size the
  file declares), and a declared size above ``max_pixels`` is E_TOO_MANY_PIXELS;
- every decoder, the probe's included where FFmpeg exposes the streams before probing, runs
  with FFmpeg's ``max_pixels``, so a frame that grows past the cap mid-stream fails to decode
  (counted in ``decode_errors``) instead of being allocated.
"""
from __future__ import annotations

import bisect
import collections
import heapq
import math
import os
from collections.abc import Iterator
from fractions import Fraction
from typing import ClassVar

import av
import numpy as np
from av.video.codeccontext import VideoCodecContext
from av.video.reformatter import VideoReformatter
from av.video.stream import VideoStream

from vqa.decode.base import (MAX_ASPECT_RATIO, PTS_TOLERANCE_S, SEEK_AHEAD_S, VIDEO_FORMATS,
                             VideoReader, check_frame_size)
from vqa.codes import ErrorCode, WarningCode
from vqa.decode.fields import deinterlace
from vqa.decode.hdr import HDR_TRANSFERS, to_sdr
from vqa.errors import InputError, UsageError
from vqa.types import VideoInfo

# What PyAVReader._measure found: (end_s, packets counted, ended, estimate_s, packets read,
# the start the times count from).
_Measurement = tuple[float | None, int | None, bool, float, int, float]

# Packets in a row that fail to demux or decode before the rest of the stream is given up.
MAX_CONSECUTIVE_DECODE_ERRORS = 16
# Seeks that land after their target (a sparse or wrong index) back off this many times,
# each twice as far, before falling back to the start of the stream.
SEEK_RETRIES = 3
_NO_INDEX = ("mpegts", "mpeg")  # demuxers whose index is only what seeking has passed
# AVI stores no presentation times: FFmpeg labels frames with their decode order, so with
# B-frames the labels come out shuffled (1, 4, 3, 5, 2, ...) although the frames are in
# display order. Holding this many decoded frames (H.264's largest reorder buffer) and handing
# out the smallest label each time gives every frame its place.
AVI_REORDER_FRAMES = 16
# A decoder whitelist naming no decoder: FFmpeg's stream probe then reads headers only.
_NO_DECODER = "vqa-headers-only"
# Measuring the length (``_measure``): packets (no decoding) read from near the declared end,
# or from the start when nothing is declared, at most this many packets or bytes. Past either,
# the length is estimated from the file size at the rate (seconds per byte) measured so far.
MEASURE_MAX_PACKETS = 20_000
MEASURE_MAX_BYTES = 64 << 20
MEASURE_TAIL_S = 1.0  # the measure starts this far before the declared end (at its keyframe)
# A measured end this far from the declared one (and 2% of it) means the header is wrong.
LENGTH_SLACK_S = 1.0
# Draining (``_drain_pays``): a run's last frames are often decoded already, held back by the
# decoder to put B-frames in order (two frames of an x264 stream), and reading on decodes the
# next packets only to push them out (a fifth of the decoding of the default plan on a 1080p
# clip with a keyframe every 2 s). When the read seeks or stops after them, the decoder is
# drained for them instead, if every packet still to come shows later: this many packets are
# looked at ahead for that (H.264's and HEVC's largest reorder buffer).
DRAIN_LOOKAHEAD_PACKETS = 16
_END = object()  # the end of the stream, met while looking ahead


_MP4_FIRST_BOXES = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")  # what an MP4/MOV starts with


def open_container(source: str, *, max_pixels: int,
                   headers_only: bool = False) -> av.container.InputContainer:
    """Open ``source`` (``VideoReader.source``) through the file protocol alone, as one of
    ``VIDEO_FORMATS``.

    ``headers_only`` forbids FFmpeg's probe every decoder, so no frame is allocated and the
    stream's size is the one the file declares. Otherwise ``max_pixels`` reaches the probe's
    decoders (for formats whose streams are known before probing: mp4, mkv, avi...).
    """
    container_options = {"protocol_whitelist": "file", "format_whitelist": ",".join(VIDEO_FORMATS)}
    if headers_only:
        container_options["codec_whitelist"] = _NO_DECODER
    # metadata_errors: tags are untrusted bytes too; a non-UTF-8 title must not fail the open.
    return av.open("file:" + source, mode="r", metadata_errors="replace",
                   container_options=container_options, options={"max_pixels": str(max_pixels)})


ATTACHED_PIC = 0x0400  # AV_DISPOSITION_ATTACHED_PIC, stable across FFmpeg versions


def video_streams(container: av.container.InputContainer) -> list[VideoStream]:
    """The container's video streams, less attached pictures: cover art in an audio file (or a
    thumbnail in a video) is one still image that FFmpeg lists as a video stream."""
    return [s for s in container.streams.video if not int(s.disposition) & ATTACHED_PIC]


_Keyframe = tuple[int, Fraction, int | None]  # a keyframe packet's pts, time base and byte position


def _keyframe_packets(packets: Iterator[av.Packet], max_packets: int) -> list[_Keyframe] | None:
    """The keyframe packets among ``packets``; None past ``max_packets`` packets."""
    out: list[_Keyframe] = []
    for n, p in enumerate(packets):
        if n >= max_packets:
            return None
        if p.is_keyframe and p.pts is not None and p.time_base is not None:
            out.append((p.pts, p.time_base, p.pos))
    return out


def _indexed_keyframe_entries(stream: VideoStream, max_packets: int) -> list[tuple[int, int]] | None:
    """The (decode time, byte position) of each keyframe in the stream's index, where the index
    lists every frame (MP4 and MOV build it from the file's tables; Matroska's cues are partial,
    MPEG-TS has none) and keyframes are few enough that a seek to each costs less than reading
    every packet (not all-intra and the like); None otherwise."""
    entries = stream.index_entries
    if not entries or len(entries) != stream.frames or len(entries) > max_packets:
        return None
    keys = [(e.timestamp, e.pos) for e in entries if e.is_keyframe]
    return keys if len(keys) * 4 <= len(entries) else None


def _indexed_keyframes(container: av.container.InputContainer, stream: VideoStream,
                       keys: list[tuple[int, int]]) -> list[_Keyframe] | None:
    """The keyframe packets at ``keys`` (``_indexed_keyframe_entries``), each read after a seek
    to it: a few packets, not all. The index holds decode times and the seek takes presentation
    times, so each seek adds the first packet's offset between the two (x264's and most
    encoders' keyframes share it). None where a packet disagrees with its entry, or a seek
    fails: the container is then somewhere past its start."""
    first = next(iter(container.demux(stream)), None)
    if first is None or first.pts is None or first.dts is None:
        return None
    shift = first.pts - first.dts
    out: list[_Keyframe] = []
    try:
        for timestamp, pos in keys:
            container.seek(timestamp + shift, backward=True, any_frame=False, stream=stream)
            p = next(iter(container.demux(stream)), None)
            if p is None or not p.is_keyframe or p.dts != timestamp or p.pos != pos:
                return None
            if p.pts is not None and p.time_base is not None:
                out.append((p.pts, p.time_base, p.pos))
    except av.error.FFmpegError:  # a seek the file refuses: the scan decides
        return None
    return out


def _video_stream(container: av.container.InputContainer) -> VideoStream:
    """The video stream a player plays (``video_streams``); IndexError when there is none.
    Of several, FFmpeg's choice (av_find_best_stream: the default one, then one of more than
    one frame, then the higher bitrate): a poster muxed as a one-frame track before the video
    (Matroska cannot flag it an attached picture) is not it. One file, one choice, every open."""
    streams = video_streams(container)
    if len(streams) > 1:
        best = container.streams.best("video")
        if best is not None and best in streams:
            return best
    return streams[0]


def _declared_duration(container: av.container.InputContainer) -> float:
    """The video stream's duration in seconds as the file declares it, else the container's, else 0."""
    stream = _video_stream(container)
    if stream.duration:
        return float(stream.duration * (stream.time_base or Fraction(1, 1_000_000)))
    if container.duration:
        declared = container.duration / av.time_base
        if container.format.name.startswith("matroska") and stream.start_time and stream.start_time > 0:
            # Matroska declares its segment's length from timestamp 0: a stream that starts
            # later (cut with -copyts, recorded live) holds only what follows its start.
            declared = max(0.0, declared - float(stream.start_time * (stream.time_base or 0)))
        return declared
    return 0.0


def _frames_shown(container: av.container.InputContainer, stream: VideoStream) -> int:
    """The frames the stream declares, less those an MP4/MOV edit list hides: a clip trimmed
    without re-encoding (``ffmpeg -ss 5 -c copy``) keeps the frames before the cut back to a
    keyframe, for the decoder, flagged to be dropped (and FFmpeg leaves out those it does not
    need). The hidden ones sit at the ends of the index: counted from there, not one by one."""
    frames, entries = stream.frames, stream.index_entries
    n = len(entries)
    if not frames or not n or n > frames or not container.format.name.startswith("mov"):
        return frames
    first, last = 0, n - 1
    while first < n and entries[first].is_discard:
        first += 1
    while last > first and entries[last].is_discard:
        last -= 1
    return last - first + 1 if first < n else frames


class PyAVReader(VideoReader):
    BACKEND_NAME: ClassVar[str] = "pyav"
    SEEKS_AHEAD: ClassVar[bool] = True  # keyframe seek + decode forward is frame-exact
    # On the way to a run, packets of frames no other frame refers to are not decoded
    # (FFmpeg's skip_frame NONREF): about half the frames of an x264 stream with B-frames.
    DROPS_BEFORE_RUNS: ClassVar[bool] = True
    _skipping = False  # the decoder's skip_frame is NONREF

    _container: av.container.InputContainer | None = None
    _reformatter: VideoReformatter | None = None  # one per reader (``_retrieve``)
    _measurement: _Measurement | None = None  # what _measure found, read at open
    _unseekable = False  # a seek failed: runs are reached by decoding on, or by reopening
    _seeks_back = False  # a seek ahead landed far behind: seeking ahead is pointless here
    _drains = True  # False once a drain gave other frames than the packets promised
    # Whether the container that decodes is opened with FFmpeg's stream probe, which decodes
    # frames (on a thread per core) to fill in the codec's parameters. The NVDEC readers, which
    # hand the packets to NVDEC and decode one picture with FFmpeg, open without it (a probe
    # cost more CPU than the rest of such a video's reading).
    _probes = True
    _sar: Fraction | None = None  # the pixels' shape, where they are not square
    # Whether keyframe_times may read the keyframes through the container's index. A scan of
    # every packet gives up the interpreter's lock at each one, and each time waits to take it
    # back: the GPU engine's session threads spent more time there than anywhere else. The CPU
    # path keeps the scan, a small share of a worker's video, as it was measured and recorded.
    KEYFRAMES_FROM_INDEX: ClassVar[bool] = False
    _keyframes_s: list[float] | None = None  # keyframe_times' scan, for streams with no index
    _keyframe_pos: dict[float, int] = {}  # the byte where each of those keyframes' packets starts

    def keyframe_times(self, max_packets: int) -> list[float] | None:
        """Keyframe times from the packets alone, through a second handle so decoding is
        undisturbed; None past ``max_packets`` packets or when the file cannot be demuxed.
        With ``KEYFRAMES_FROM_INDEX`` and an index of every frame (MP4, MOV), only the
        keyframes' packets are read (``_indexed_keyframes``); otherwise every packet is."""
        try:
            with open_container(self.source, max_pixels=self.max_pixels, headers_only=True) as container:
                stream = _video_stream(container)
                keys = _indexed_keyframe_entries(stream, max_packets) if self.KEYFRAMES_FROM_INDEX else None
                packets = _indexed_keyframes(container, stream, keys) if keys is not None else \
                    _keyframe_packets(container.demux(stream), max_packets)
            if packets is None and keys is not None:  # the index let us down past the start: scan a fresh handle
                with open_container(self.source, max_pixels=self.max_pixels, headers_only=True) as container:
                    packets = _keyframe_packets(container.demux(_video_stream(container)), max_packets)
            if packets is None:
                return None
            times, pos = [], {}
            for pts, time_base, at in packets:
                times.append(float((pts - self._start_pts) * time_base))
                if at is not None and at >= 0:
                    pos[times[-1]] = at
            self._keyframes_s, self._keyframe_pos = sorted(times), pos
            return list(self._keyframes_s)
        except (av.error.FFmpegError, IndexError):
            return None

    def _open_checked(self, *, headers_only: bool) -> av.container.InputContainer:
        try:
            return open_container(self.source, max_pixels=self.max_pixels, headers_only=headers_only)
        except av.error.FileNotFoundError:
            raise InputError(f"no such file: {self.path!r}", code=ErrorCode.E_NOT_FOUND) from None
        except av.error.PermissionError:
            raise InputError(f"cannot read {self.path!r}: permission denied",
                             code=ErrorCode.E_UNREADABLE) from None
        except av.error.FFmpegError as exc:
            raise InputError(f"{self.path!r} {self._what_was_found(exc.strerror)}",
                             code=ErrorCode.E_NOT_VIDEO) from None

    def _what_was_found(self, strerror: str | None) -> str:
        """Why FFmpeg would not open the file, told from its first bytes: the user reads what
        was found (an MP4 with no index, a playlist), not a list of what might have been."""
        try:
            head = os.pread(self._file.fd, 4096, 0)
        except (AttributeError, OSError):
            head = b""
        if head[4:8] in _MP4_FIRST_BOXES:
            return ("is an MP4/MOV file with no index (no moov box) FFmpeg can find: it was cut short "
                    f"(an interrupted upload or copy) or is still being written; the whole file is needed ({strerror})")
        if head.startswith(b"#EXTM3U"):
            return "is an HLS playlist, which names other files: refused; score the video it names"
        if head.startswith(b"ffconcat"):
            return "is an ffconcat script, which names other files: refused; score the videos it names"
        # An animated PNG names its animation (acTL) before its first picture data (IDAT); an
        # animated WebP sets bit 1 of its VP8X flags.
        actl, idat = head.find(b"acTL"), head.find(b"IDAT")
        apng = head.startswith(b"\x89PNG") and actl >= 0 and (idat < 0 or actl < idat)
        if apng or (head[8:16] == b"WEBPVP8X" and len(head) > 20 and head[20] & 0x02):
            return ("is an animated image (APNG or animated WebP), which this reader does not take: "
                    "convert it to a video (GIF is read)")
        if head.startswith((b"\x89PNG", b"\xff\xd8\xff", b"BM")) or head[8:12] == b"WEBP":
            return "is a still image, not a video"
        return f"is not a video container FFmpeg recognises and this reader accepts ({strerror})"

    def _box_cut_short(self) -> str | None:
        """For an MP4/MOV cut short, the type of the top-level box that runs past the end of the
        file ("moov": its index, "mdat": its frames); None for a whole one, or another format."""
        try:
            size, pos = os.fstat(self._file.fd).st_size, 0
            for k in range(64):  # top-level boxes: ftyp, moov, free, mdat, ...
                head = os.pread(self._file.fd, 16, pos)
                if len(head) < 8 or (k == 0 and head[4:8] not in _MP4_FIRST_BOXES):
                    return None
                n = int.from_bytes(head[:4], "big")
                if n == 1 and len(head) == 16:  # a 64-bit size follows the type
                    n = int.from_bytes(head[8:16], "big")
                elif n == 0:  # the box runs to the end of the file
                    n = size - pos
                if n < 8:
                    return None
                if pos + n > size:
                    return head[4:8].decode("latin-1")
                pos += n
        except (AttributeError, OSError):
            pass
        return None

    def _refuse_cut_index(self) -> None:
        """An MP4 cut inside its index opens with no stream, or one with no codec: say so."""
        if self._box_cut_short() == "moov":
            raise InputError(f"{self.path!r} is an MP4/MOV file whose index (moov box) is cut short: it was cut "
                             "(an interrupted upload or copy) or is still being written; the whole file is needed",
                             code=ErrorCode.E_NOT_VIDEO)

    def _input(self) -> av.container.InputContainer:
        """The open container; UsageError once the reader was closed (a read under way)."""
        if self._container is None:
            raise UsageError(f"{type(self).__name__} for {self.path!r} is closed")
        return self._container

    def _codec_context(self) -> VideoCodecContext:
        ctx = _video_stream(self._input()).codec_context
        if ctx is None:  # PyAV has no context where FFmpeg has no decoder for the codec id
            self._refuse_cut_index()
            raise InputError(f"{self.path!r}: FFmpeg has no decoder for its video codec", code=ErrorCode.E_DECODE)
        return ctx

    def _open(self) -> VideoInfo:
        # Headers first, with no decoder: the declared size is checked before any frame exists.
        self._container = self._open_checked(headers_only=True)
        if not video_streams(self._container):
            self._refuse_cut_index()
            kinds = sorted({"attached picture" if s.type == "video" else s.type
                            for s in self._container.streams}) or ["none"]
            raise InputError(f"{self.path!r} has no video stream (streams: {', '.join(kinds)})",
                             code=ErrorCode.E_NO_VIDEO_STREAM)
        declared = self._codec_context()
        check_frame_size(self.path, declared.width, declared.height, self.max_pixels, what="declares")
        # The length from the packets, while this container reads headers and packets only.
        self._measurement = self._measure(self._container, _declared_duration(self._container))
        self._container.close()
        self._container = self._open_checked(headers_only=not self._probes)
        if not self._probes and video_streams(self._container) and _video_stream(self._container).start_time is None:
            # Where only the probe finds the stream's first timestamp (Matroska with H.264 or
            # HEVC), it runs: frame times count from there.
            self._probes = True
            self._container.close()
            self._container = self._open_checked(headers_only=False)
        if not video_streams(self._container):
            raise InputError(f"{self.path!r} has no video stream FFmpeg can probe",
                             code=ErrorCode.E_NO_VIDEO_STREAM)
        stream = self._stream = _video_stream(self._container)
        ctx = self._codec_context()
        check_frame_size(self.path, ctx.width, ctx.height, self.max_pixels, what="declares")
        # Every frame the decoder allocates is held to the cap, also one that grows mid-stream.
        ctx.options = {**ctx.options, "max_pixels": str(self.max_pixels)}
        # Explicit, so parallel workers each decode on `threads` cores instead of all of them.
        ctx.thread_count = self.threads
        if self.threads > 1:
            ctx.thread_type = "AUTO"
        self._time_base = stream.time_base or Fraction(1, 1_000_000)
        self._start_pts = stream.start_time or 0
        self._fps = float(stream.average_rate or stream.guessed_rate or 0)
        self._relabel = self._container.format.name == "avi"
        self._reset()

        # The display matrix rides on decoded frames, so peek at the first one and keep it.
        first = self._first_frame()
        if first is None:
            cut = self._box_cut_short()
            why = f": the file is cut short (its {cut} box runs past its end: an interrupted upload or copy)"
            raise InputError(f"no frame of {self.path!r} could be decoded{why if cut else ''}", code=ErrorCode.E_DECODE)
        check_frame_size(self.path, first.width, first.height, self.max_pixels, what="decodes to")
        self._ready.append(first)
        # After a decode: where no probe ran, the decoder has read the bitstream's own (H.264 VUI).
        sar = stream.sample_aspect_ratio or ctx.sample_aspect_ratio
        self._sar = sar if sar and sar != 1 and Fraction(1, 4) <= sar <= 4 else None
        # frame.rotation is counter-clockwise, as np.rot90 turns; snap to quarter turns. A matrix
        # with no angle (all zero: NaN in FFmpeg, INT_MIN once PyAV casts it) is no rotation, as
        # FFmpeg's own autorotate takes it.
        rotation = first.rotation
        self._rot_k = round(rotation / 90) % 4 if -360 <= rotation <= 360 else 0
        width, height = self._shown_width(first.width, first.height), first.height
        if self._rot_k % 2:
            width, height = height, width
        duration = _declared_duration(self._container)
        shown = _frames_shown(self._container, stream)
        frame_count, count_declared = shown or round(duration * self._fps), shown > 0
        measured = self._measured_length(duration)
        if measured is not None:
            duration, frame_count, count_declared = measured
        return VideoInfo(
            width=width, height=height, fps=self._fps, duration_s=duration,
            frame_count=frame_count, frame_count_declared=count_declared,
            codec=ctx.name, rotation=(90 * self._rot_k) % 360, pixel_format=first.format.name,
        )

    def _first_frame(self) -> av.VideoFrame | None:
        """The stream's first frame, which the checks at open read; the NVDEC readers decode less."""
        return self._next_av_frame()

    def _measured_length(self, declared_s: float) -> tuple[float, int, bool] | None:
        """(duration_s, frame_count, exact) from the packets, when the header gives no length
        or a wrong one; None when it is right. Warns W_TRUNCATED (declares more than it holds)
        or W_LENGTH (declares less, or nothing, and the stream is too long to count)."""
        m = self._measurement
        if m is None:
            return None
        end_s, counted, eof, estimate_s, read, origin_s = m
        # The measure's times count from the start its headers-only open knew (none, for a
        # Matroska stream starting late): count them from the stream's start instead.
        shift = float(self._start_pts * self._time_base) - origin_s
        if end_s is not None and shift:
            end_s, estimate_s = end_s - shift, estimate_s - shift
        if end_s is None:  # no timestamps at all (raw streams): the frame rate's clock
            if not (self._fps and read):
                return None
            end_s = read / self._fps
            estimate_s = end_s * estimate_s  # here: the file's size over the bytes read
        fps = self._fps
        slack = max(LENGTH_SLACK_S, 0.02 * declared_s)
        if declared_s > 0 and (abs(end_s - declared_s) <= slack if eof else end_s <= declared_s + slack):
            return None  # the header is right, or (the scan stopped short of the end) not contradicted
        if eof:
            frames = counted if counted is not None else round(end_s * fps)
            if declared_s > end_s:
                self._warn(WarningCode.W_TRUNCATED, f"the file declares {declared_s:.3f} s but its video stream "
                           f"ends at {end_s:.3f} s: the plan follows what is there")
            elif declared_s > 0:
                self._warn(WarningCode.W_LENGTH, f"the file declares {declared_s:.3f} s but its video stream runs "
                           f"to {end_s:.3f} s: the plan follows the measured length")
            return end_s, frames, counted is not None
        # Too long to read through: at least end_s; estimated from the bytes per second so far.
        length = max(end_s, estimate_s)
        self._warn(WarningCode.W_LENGTH, (f"the file declares {declared_s:.3f} s" if declared_s > 0 else
                                "the file declares no length") + f"; its video stream runs past "
                   f"{end_s:.3f} s, about {length:.0f} s by its size: the plan follows that estimate")
        return length, round(length * fps), False

    def _measure(self, container: av.container.InputContainer, declared_s: float) -> _Measurement | None:
        """Demux (never decode) the video packets of ``container`` from near the declared end,
        or from the start, for at most MEASURE_MAX_PACKETS / MEASURE_MAX_BYTES: (end_s or None
        without timestamps, packets counted from the start or None, whether the stream ended,
        end estimated from the file size, packets read, the start the times count from);
        None when nothing could be read."""
        try:
            stream = _video_stream(container)
            time_base = stream.time_base or Fraction(1, 1_000_000)
            start_pts = stream.start_time or 0
            from_start = True
            if declared_s > MEASURE_TAIL_S:
                try:  # the index, or the demuxer's search, takes us near the declared end
                    container.seek(start_pts + math.floor((declared_s - MEASURE_TAIL_S) / time_base),
                                   stream=stream, backward=True)
                    from_start = False
                except av.error.FFmpegError:
                    pass  # cannot seek (raw streams): count from the start
            count = size = 0
            end_s: float | None = None
            first_s: float | None = None
            last_t: float | None = None
            first_pos: int | None = None
            last_pos: int | None = None
            eof = True
            for packet in container.demux(stream):
                if packet.size == 0 and packet.pts is None and packet.dts is None:
                    continue  # the flush packet at the end
                count += 1
                size += packet.size
                t = packet.pts if packet.pts is not None else packet.dts
                if t is not None:
                    t_s = float((t - start_pts) * time_base)
                    if first_s is None:
                        first_s = t_s
                    # The latest frame shown ends the stream, after its own duration. Not the
                    # latest pts + duration: durations are decode-time steps, and with B-frames
                    # the step over a gap belongs to a frame shown after it (counted twice).
                    if last_t is None or t_s >= last_t:
                        last_t = t_s
                        end_s = t_s + (float(packet.duration * time_base) if packet.duration else 0.0)
                if packet.pos is not None and packet.pos >= 0:
                    first_pos = packet.pos if first_pos is None else first_pos
                    last_pos = packet.pos
                if count >= MEASURE_MAX_PACKETS or size >= MEASURE_MAX_BYTES:
                    eof = False
                    break
        except (av.error.FFmpegError, IndexError):
            return None
        if count == 0 or (end_s is None and not from_start):
            return None
        estimate_s: float
        if not eof and last_pos and first_pos is not None and last_pos > first_pos:
            if end_s is None:  # no clock: the share of the file read, for the caller to scale by
                estimate_s = self._file.size_bytes / last_pos
            else:
                rate = (end_s - (first_s or 0.0)) / (last_pos - first_pos)  # seconds per byte
                estimate_s = end_s + rate * max(0, self._file.size_bytes - last_pos)
        elif end_s is None:
            estimate_s = 1.0
        else:
            estimate_s = end_s
        return (end_s, count if from_start and eof else None, eof, estimate_s, count if from_start else 0,
                float(start_pts * time_base))

    def _reset(self) -> None:
        """Forget decoder-side state after opening or seeking."""
        self._packets = self._input().demux(self._stream)
        self._ahead: collections.deque = collections.deque()  # packets demuxed to look ahead, not yet decoded
        # pts of the packets the decoder was given since it started afresh whose frames have
        # not come out (None: not known, no drain); the decoder's state as a drain would find it.
        self._held: list[int] | None = []
        self._drained = False  # the decoder gave out what it held and takes no packet now
        self._last_out: int | None = None  # pts of the last frame out of the decoder
        self._pass_through: int | None = None  # after a drain: frames up to this pts were given out
        self._queue: collections.deque[av.VideoFrame] = collections.deque()  # decoded, not yet out
        self._ready: collections.deque[av.VideoFrame] = collections.deque()  # out, put back
        self._labels: list[int] = []  # heap of the queued frames' pts, when relabelling
        self._frame: av.VideoFrame | None = None
        self._prev_pts_s: float | None = None
        self._eof = False
        self._consecutive_errors = 0
        self._packets_in = 0  # packets given to the decoder since it started afresh

    def _next_av_frame(self) -> av.VideoFrame | None:
        if self._ready:
            return self._ready.popleft()
        frame = self._decode_next(AVI_REORDER_FRAMES if self._relabel else 1)
        if frame is not None and self._relabel and frame.pts is not None and self._labels:
            frame.pts = heapq.heappop(self._labels)
        return frame

    def _decode_next(self, depth: int) -> av.VideoFrame | None:
        """The next decoded frame, once ``depth`` frames are decoded ahead (or the stream ends)."""
        while len(self._queue) < depth and not self._eof:
            if depth == 1 and self._drain_pays():
                self._drain()
                if self._queue:
                    break
            if self._drained:
                self._resume_after_drain()
            try:
                packet = self._next_packet()
            except StopIteration:
                self._eof = True
                break
            except MemoryError:  # ENOMEM is the worker's memory limit, not a corrupt packet
                raise
            # A demux error ends the generator: start a new one. IndexError is PyAV meeting a
            # stream that appeared mid-file (MPEG-TS can announce one anywhere).
            except (av.error.FFmpegError, IndexError):
                self._packets = self._input().demux(self._stream)
                self._count_error()
                continue
            self._skip_if_before_run(packet)
            self._packets_in += packet.size > 0
            try:
                frames = self._decode_packet(packet)
            except MemoryError:
                raise
            except (av.error.InvalidDataError, av.error.FFmpegError, ValueError):
                self._held = None
                self._count_error()
                continue
            self._consecutive_errors = 0
            self._note_given(packet, frames)
            if self._pass_through is not None:  # reading on after a drain: skip what it gave out
                while frames and (frames[0].pts is None or frames[0].pts <= self._pass_through):
                    frames.pop(0)
                if frames:
                    self._pass_through = None
            self._take_out(frames)
            if self._relabel:
                for f in frames:
                    if f.pts is not None:
                        heapq.heappush(self._labels, f.pts)
        return self._queue.popleft() if self._queue else None

    def _decode_packet(self, packet: av.Packet) -> list[av.VideoFrame]:
        """The frames one packet completes (an empty packet flushes the decoder): FFmpeg's
        decoder here; the nvdec backend sends the packet to the GPU's instead."""
        return packet.decode()

    def _take_out(self, frames: list[av.VideoFrame]) -> None:
        self._queue.extend(frames)
        if frames and frames[-1].pts is not None:
            self._last_out = frames[-1].pts

    def _next_packet(self) -> av.Packet:
        """The next packet: one demuxed to look ahead first, or what demuxing met there
        (StopIteration at the end, a demux error), at the same place as reading on meets it."""
        if self._ahead:
            item = self._ahead.popleft()
            if item is _END:
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            return item
        return next(self._packets)

    def _note_given(self, packet: av.Packet, frames: list[av.VideoFrame]) -> None:
        """Keep ``_held`` up to date: this packet's frame went in, ``frames`` came out."""
        held = self._held
        if held is None:
            return
        # A packet with no time, or one the decoder may drop unseen (skip_frame), makes what
        # it holds unknown until it starts afresh.
        if packet.pts is None or packet.size == 0 or (self._skipping and not packet.is_keyframe):
            self._held = None
            return
        held.append(packet.pts)
        for frame in frames:
            if frame.pts not in held:
                self._held = None
                return
            held.remove(frame.pts)

    def _drain_pays(self) -> bool:
        """Whether the frames the read still takes (``_last_frames``) are all held by the
        decoder, and the read seeks (the decoder starts afresh) or ends after them: then a
        drain gives them without decoding another packet. Frames come out in time order, so
        every packet still to come must show later than the last of them (looked at ahead)."""
        last, held = self._last_frames, self._held
        if last is None or not held or not self._drains or self._drained or self._relabel:
            return False
        if self._input().format.name in _NO_INDEX:  # reading on after a drain seeks back, and
            return False  # there a seek lands on a packet, not a keyframe: frames were lost
        seconds = [self._pts_to_s(p) for p in sorted(held)]
        wanted = [t for t in seconds if t >= last.start_s]
        if len(wanted) < last.count or wanted[last.count - 1] >= last.end_s:
            return False
        final_s = wanted[last.count - 1]
        if last.next_start_s is not None and not (self._seeks_to(final_s, last.next_start_s)
                                                  and self._seek_starts_afresh(final_s, last.next_start_s)):
            return False
        return self._ahead_later_than(sorted(held)[len(seconds) - len(wanted) + last.count - 1])

    def _ahead_later_than(self, pts: int) -> bool:
        """Demux up to DRAIN_LOOKAHEAD_PACKETS ahead: whether each shows after ``pts``."""
        while len(self._ahead) < DRAIN_LOOKAHEAD_PACKETS and not (
                self._ahead and (self._ahead[-1] is _END or isinstance(self._ahead[-1], BaseException))):
            try:
                self._ahead.append(next(self._packets))
            except StopIteration:
                self._ahead.append(_END)
            except Exception as e:  # noqa: BLE001 - met again, and handled, when reading on reaches it
                self._ahead.append(e)
        for item in self._ahead:
            if item is _END:
                return True
            if isinstance(item, BaseException) or item.pts is None or item.size == 0 or item.pts <= pts:
                return False
        return True

    def _drain(self) -> None:
        """Take every frame the decoder holds (``_drain_pays`` said they are the next ones).
        If others come out, none is kept: reading on then starts the decoder afresh
        (``_resume_after_drain``), and this reader drains no more."""
        held, self._held, self._drained = sorted(self._held or ()), [], True
        try:
            frames = self._stream.codec_context.decode(None)
        except MemoryError:
            raise
        except (av.error.FFmpegError, ValueError):
            frames = []
        if [f.pts for f in frames] != held:
            self._drains, self._held = False, None
            return
        self._take_out(frames)

    def _resume_after_drain(self) -> None:
        """Read on after a drain, where the read did not seek as expected (or the drain gave
        other frames): restart the decoder at the keyframe before the last frame it gave out
        and pass over the frames up to it, so the next frame is the one reading on would have
        given. Those frames are not grabbed, so they are not counted."""
        self._drained, self._ahead, self._held = False, collections.deque(), []
        self._pass_through = self._last_out
        try:
            self._input().seek(int(self._last_out if self._last_out is not None else min(self._start_pts, 0)),
                                 stream=self._stream, backward=True)
        except av.error.FFmpegError:
            self._eof = True  # cannot happen where the read was about to seek: give up the rest
            self._count_error()
        self._packets = self._input().demux(self._stream)

    def _seek_starts_afresh(self, prev_s: float, t_s: float) -> bool:
        """Whether ``_seek(t_s)``, after a frame at ``prev_s``, starts the decoder afresh (a
        seek or a reopen) rather than leaving it to decode on."""
        if t_s > prev_s + PTS_TOLERANCE_S:
            if self._seeks_back:
                return False
            keyframe = self._keyframe_before_s(t_s)
            if keyframe is not None and keyframe <= prev_s:
                return False
        if self._unseekable:
            return t_s <= prev_s + PTS_TOLERANCE_S  # _rewind_if_behind reopens
        return True

    def _pts_to_s(self, pts: int) -> float:
        return float((pts - self._start_pts) * self._time_base)

    def _before_run(self, packet: av.Packet) -> bool:
        """Whether this packet's frame shows before the run being read, so the decoder may drop
        it if nothing refers to it. Not for relabelled AVI, whose packet times are decode order."""
        before = self._drop_before_s
        return (before is not None and before > 0 and not self._relabel and packet.pts is not None
                and float((packet.pts - self._start_pts) * self._time_base) < before)

    def _skip_if_before_run(self, packet: av.Packet) -> None:
        """FFmpeg's decoder drops the frames no other refers to before a run (skip_frame NONREF)."""
        skip = self._before_run(packet)
        if skip != self._skipping:
            self._stream.codec_context.skip_frame = "NONREF" if skip else "DEFAULT"
            self._skipping = skip

    def _count_error(self) -> None:
        self.decode_errors += 1
        self._consecutive_errors += 1
        if self._consecutive_errors >= MAX_CONSECUTIVE_DECODE_ERRORS:
            self._eof = True

    def _pts_s(self, frame: av.VideoFrame) -> float:
        if frame.pts is None:  # rare (raw streams): step on from the previous frame
            prev = self._prev_pts_s
            return 0.0 if prev is None else prev + (1 / self._fps if self._fps else 0.0)
        return float((frame.pts - self._start_pts) * self._time_base)

    def _grab(self) -> float | None:
        frame = self._next_av_frame()
        if frame is None:
            self._frame = None
            return None
        self._frame = frame
        self._prev_pts_s = self._pts_s(frame)
        return self._prev_pts_s

    def _retrieve(self) -> np.ndarray | None:
        if self._frame is None or self._frame.width * self._frame.height > self.max_pixels:
            return None  # counted as a decode error; FFmpeg's max_pixels should have refused it
        # swscale handles every input format (10-bit, 4:4:4, gray, alpha, full-range yuvj).
        # Through the reader's own reformatter: ``frame.to_ndarray`` makes a new swscale context
        # for every frame, with FFmpeg's default of a thread per core, so each frame set up
        # tables and started (and stopped) a thread pool (issue 18: 0.34 ms a 720p frame on 2
        # cores, 4 ms a 360p one; bit-identical output). One thread: a pool kept for the
        # reader's life beside FFmpeg's decode threads ran a worker out of its address space
        # (RLIMIT_AS) with 15 threads a task, and every frame failed with EAGAIN.
        if self._reformatter is None:
            self._reformatter = VideoReformatter()
        width = self._shown_width(self._frame.width, self._frame.height)
        trc = self._frame.color_trc
        # HDR (PQ, HLG): 16-bit code values, tone-mapped to SDR (vqa.decode.hdr).
        out = "rgb48le" if trc in HDR_TRANSFERS else "rgb24"
        if width == self._frame.width:
            rgb = self._reformatter.reformat(self._frame, format=out, threads=1).to_ndarray()
        else:  # anamorphic: resampled to square pixels in the same pass
            rgb = self._reformatter.reformat(self._frame, width=width, format=out, threads=1).to_ndarray()
        if trc in HDR_TRANSFERS:
            rgb = to_sdr(rgb, trc)
        if self._frame.interlaced_frame:  # two fields, two instants: as a player shows them
            rgb = deinterlace(rgb)
        if self._rot_k:
            rgb = np.rot90(rgb, self._rot_k)
        return np.ascontiguousarray(rgb)

    def _shown_width(self, width: int, height: int) -> int:
        """A frame's width as a player shows it: anamorphic pixels (DVD, HDV: a sample aspect
        ratio other than 1) are resampled to square ones, as ``ffmpeg -vf scale=iw*sar:ih``
        does, within the pixel cap and the aspect ratio cap. 1440x1080 HDV with 4:3 pixels is
        judged at 1920x1080."""
        if self._sar is None:
            return width
        shown = max(1, round(width * self._sar))
        fits = shown * height <= self.max_pixels and max(shown, height) <= MAX_ASPECT_RATIO * min(shown, height)
        return shown if fits else width

    def _keyframe_before_s(self, t_s: float) -> float | None:
        """Time of the last keyframe at or before t_s per the demuxer's index, when it covers t_s.
        MPEG-TS and -PS have no index: FFmpeg's seeks add what they pass (its first and last
        packets, say), which looked like an index covering the file with one keyframe at its
        start, and every run was reached by decoding on (1,579 frames of 1,800 for 32 sampled,
        keyframes every 10 s). There the keyframe scan's times are used, or none."""
        if self._input().format.name in _NO_INDEX:
            keys = self._keyframes_s
            i = -1 if keys is None else bisect.bisect_right(keys, t_s + PTS_TOLERANCE_S) - 1
            return None if i < 0 or keys is None else keys[i]
        entries = self._stream.index_entries
        ts = self._start_pts + math.floor(t_s / self._time_base)
        if len(entries) < 2 or entries[len(entries) - 1].timestamp < ts:
            return None  # no index (MPEG-TS) or not read that far: unknown
        # Only saves decoding: a sparse index gives an earlier keyframe, never a wrong frame.
        i = entries.search_timestamp(ts, backward=True)
        # Index timestamps are dts (<= pts), so this errs towards seeking.
        return None if i < 0 else float((entries[i].timestamp - self._start_pts) * self._time_base)

    def _seek(self, t_s: float) -> None:
        prev = self._prev_pts_s
        if prev is not None and t_s > prev + PTS_TOLERANCE_S:
            if self._seeks_back:
                return  # this stream's seeks land at its start: decoding on is the way forward
            keyframe = self._keyframe_before_s(t_s)
            if keyframe is not None and keyframe <= prev:
                return  # long GOP: a seek would only go back to a keyframe already behind us
        if self._unseekable:
            self._rewind_if_behind(t_s)
            return
        if self._seek_to_keyframe_byte(t_s):
            return
        target = t_s
        for attempt in range(SEEK_RETRIES + 1):
            if attempt == SEEK_RETRIES:
                target = 0.0  # last resort: the start, exact by construction
            # The start itself by timestamp 0 or earlier: a backward seek to an MPEG-TS
            # stream's own start time can find no keyframe at or before it.
            offset = (self._start_pts + math.floor(target / self._time_base) if target > 0
                      else min(self._start_pts, 0))
            try:
                self._input().seek(int(offset), stream=self._stream, backward=True)
            except av.error.FFmpegError:
                # Raw streams cannot seek at all (and a failed seek can leave the demuxer at its
                # end): start again, and from now on decode on to what is ahead.
                self._unseekable = True
                self._reopen()
                return
            self._reset()
            frame = self._next_av_frame()
            if (frame is not None and prev is not None and t_s > prev + SEEK_AHEAD_S
                    and self._pts_s(frame) < prev - SEEK_AHEAD_S):
                # A seek ahead landed far behind where we were (GIF seeks only to the start):
                # later runs are reached by decoding on, not by reading the stream again each time.
                self._seeks_back = True
            # Landing after t_s would silently skip frames of the run: back off and retry.
            # Landing on nothing is the end of the stream, unless this reader has not decoded
            # a frame yet: a timestamp seek in a short MPEG-TS (no index) can land past its
            # data. Later on, a run past a truncated file's end must not decode it all again.
            # Packets that decode to nothing are no end: an MPEG-TS seek lands on the packet
            # nearest its time, not on a keyframe, and past the last keyframe none follows.
            late = frame is not None and self._pts_s(frame) > t_s + PTS_TOLERANCE_S
            blind = frame is None and self._packets_in > 0
            if target > 0 and (late or blind or (frame is None and self.frames_decoded == 0)):
                target = max(0.0, target - SEEK_AHEAD_S * 2 ** attempt)
                continue
            if frame is not None and attempt == 0:
                frame = self._closer_landing(t_s, frame)
            if frame is not None:
                self._ready.append(frame)
            return

    def _seek_to_keyframe_byte(self, t_s: float) -> bool:
        """MPEG-TS and -PS: seek to the byte where the keyframe at or before ``t_s`` starts,
        as the keyframe scan found it. A timestamp seek there lands on the packet nearest the
        time, mid-GOP, and found the run only by backing off a GOP or more: 0.7 s a run of
        1080p, against 0.03 s this way. Kept only where the first frame is that keyframe."""
        if self._input().format.name not in _NO_INDEX:
            return False
        key = self._keyframe_before_s(t_s)
        pos = None if key is None else self._keyframe_pos.get(key)
        if key is None or pos is None:
            return False
        try:
            self._input().seek(pos, unsupported_byte_offset=True)
        except av.error.FFmpegError:
            return False
        self._reset()
        frame = self._next_av_frame()
        if frame is None or abs(self._pts_s(frame) - key) > PTS_TOLERANCE_S:
            return False  # the timestamp seek that follows starts afresh
        self._ready.append(frame)
        return True

    def _closer_landing(self, t_s: float, frame: av.VideoFrame) -> av.VideoFrame:
        """A seek that landed a whole GOP early, although the index has a keyframe at or before
        ``t_s``: MP4 with B-frames, where FFmpeg compares the seek target with decode times and
        a keyframe's own presentation time can land on the keyframe before it. Decoding that
        GOP only to drop it doubled the work of split reads. Nudge the target ahead by up to
        four frame durations and keep the first landing that is later yet not past ``t_s``;
        otherwise seek back to where the first landing was."""
        key = self._keyframe_before_s(t_s)
        landed = self._pts_s(frame)
        if key is None or landed >= key - PTS_TOLERANCE_S or not self._fps:
            return frame
        first_offset = self._start_pts + math.floor(t_s / self._time_base)
        for k in (1, 2, 4):
            offset = self._start_pts + math.floor((t_s + k / self._fps) / self._time_base)
            self._input().seek(int(offset), stream=self._stream, backward=True)
            self._reset()
            nudged = self._next_av_frame()
            if nudged is not None and landed + PTS_TOLERANCE_S < self._pts_s(nudged) <= t_s + PTS_TOLERANCE_S:
                return nudged
        self._input().seek(int(first_offset), stream=self._stream, backward=True)
        self._reset()
        return self._next_av_frame() or frame

    def _rewind_if_behind(self, t_s: float) -> None:
        """For a stream that cannot seek: reopen it when ``t_s`` is behind the decode position."""
        if self._prev_pts_s is not None and t_s <= self._prev_pts_s + PTS_TOLERANCE_S:
            self._reopen()

    def _reopen(self) -> None:
        """Read the stream again from its start, through a fresh container."""
        self._input().close()
        self._skipping = False  # a fresh decoder decodes every frame
        self._container = self._open_checked(headers_only=not self._probes)
        self._stream = _video_stream(self._container)
        ctx = self._codec_context()
        ctx.options = {**ctx.options, "max_pixels": str(self.max_pixels)}
        ctx.thread_count = self.threads
        if self.threads > 1:
            ctx.thread_type = "AUTO"
        self._reset()

    def _release(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            container.close()
