"""OpenCV decode backend (cv2.VideoCapture over its bundled FFmpeg).

OpenCV cannot say why a file failed to open, so every open failure past the path checks is
E_NOT_VIDEO (an audio-only file included), and it reports no per-packet decode errors.
It never seeks ahead: CAP_PROP_POS_FRAMES lands on approximate frames for many streams, so
runs are reached by decoding forward (grab without colour conversion); a run behind the
decode position is reached by reopening the file, which is exact.

Untrusted files: OpenCV takes FFmpeg options only from the OPENCV_FFMPEG_CAPTURE_OPTIONS
environment variable, read at each open, so ``_capture`` sets it (under a lock, restored
after) to allow the ``file`` protocol and the demuxers in ``VIDEO_FORMATS`` alone: playlists
and concat scripts are refused (E_NOT_VIDEO) and never read the files they name. The frame
size can only be checked after open (E_TOO_MANY_PIXELS above ``max_pixels``): by then
OpenCV's FFmpeg has already decoded one frame of the declared size while probing the stream
(bounded only by FFmpeg's own limit, about 268 Mpx), and OpenCV passes no ``max_pixels`` to
its decoder, so a frame that grows mid-stream is allocated. The PyAV backend bounds both.
Names that are not UTF-8 (which cv2 cannot take, and crashes on) are opened through
/proc/self/fd.
"""
from __future__ import annotations

import os
import threading
from typing import ClassVar

import cv2
import numpy as np

from vqa.decode.base import MAX_ASPECT_RATIO, VIDEO_FORMATS, VideoReader, check_frame_size
from vqa.codes import ErrorCode
from vqa.errors import InputError, UsageError
from vqa.types import VideoInfo

# FFmpeg inside OpenCV logs every broken packet to stderr, over the progress bar and the
# summary, and OpenCV warns on each refused open; the record already says what failed.
# Quiet unless the user set these. The FFmpeg level is read at each open.
os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET
if "OPENCV_LOG_LEVEL" not in os.environ:
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)

_OPTIONS_ENV = "OPENCV_FFMPEG_CAPTURE_OPTIONS"
_SAFE_OPTIONS = f"protocol_whitelist;file|format_whitelist;{','.join(VIDEO_FORMATS)}"
_ENV_LOCK = threading.Lock()  # threads of one process opening at once share the variable


def _fourcc(value: float) -> str:
    code = int(value)
    if code <= 0:
        return ""
    text = code.to_bytes(4, "little").decode("latin-1").strip("\x00 ")
    # Formats without a FourCC come back as raw tags: show those as hex, not as garbage.
    return text.lower() if text.isascii() and text.isalnum() else f"0x{code:08x}"


class OpenCVReader(VideoReader):
    BACKEND_NAME: ClassVar[str] = "opencv"
    SEEKS_AHEAD: ClassVar[bool] = False

    _cap: cv2.VideoCapture | None = None
    _shown: tuple[int, int] | None = None  # (width, height) frames are resized to: square pixels

    def _source(self) -> str:
        """The name OpenCV's FFmpeg opens: /proc/self/fd/N of the checked descriptor, or an
        absolute real path (no "scheme:" prefix can be read into it) where there is no /proc."""
        source = self.source
        try:
            source.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"OpenCV cannot open {self.path!r}: its name is not UTF-8; rename "
                             "it or use the pyav decoder", code=ErrorCode.E_BAD_PATH) from None
        return source

    def _capture(self) -> cv2.VideoCapture:
        source = self._source()
        with _ENV_LOCK:
            saved = os.environ.get(_OPTIONS_ENV)
            # Later keys win in FFmpeg's parse, so the safe options override the caller's.
            os.environ[_OPTIONS_ENV] = _SAFE_OPTIONS if not saved else f"{saved}|{_SAFE_OPTIONS}"
            try:
                # Thread count passed at open: FFmpeg fixes it when the decoder starts.
                cap = cv2.VideoCapture(source, cv2.CAP_FFMPEG,
                                       [cv2.CAP_PROP_N_THREADS, self.threads])
            finally:
                if saved is None:
                    del os.environ[_OPTIONS_ENV]
                else:
                    os.environ[_OPTIONS_ENV] = saved
        if cap.isOpened():
            cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1)  # the default, made explicit: frames upright
        return cap

    def _only_pictures(self) -> bool:
        """True when every video stream is an attached picture (cover art in an audio file),
        which OpenCV would decode as a video: told from the headers, through PyAV. Without
        PyAV (this backend does not need it otherwise) the check is skipped: OpenCV then
        reads the picture as a video of one frame."""
        try:
            import av

            from vqa.decode.pyav import open_container, video_streams
        except ImportError:
            return False
        try:
            with open_container(self.source, max_pixels=self.max_pixels, headers_only=True) as c:
                return bool(c.streams.video) and not video_streams(c)
        except av.error.FFmpegError:
            return False  # OpenCV's own open says what is wrong

    def _open(self) -> VideoInfo:
        if self._only_pictures():
            raise InputError(f"{self.path!r} has no video stream (only an attached picture, such as "
                             "cover art)", code=ErrorCode.E_NO_VIDEO_STREAM)
        self._cap = self._capture()
        if not self._cap.isOpened():
            raise InputError(f"OpenCV cannot open {self.path!r} as a video (not a video container "
                             "it accepts, or no video stream)", code=ErrorCode.E_NOT_VIDEO)
        get = self._cap.get
        check_frame_size(self.path, int(get(cv2.CAP_PROP_FRAME_WIDTH)),
                         int(get(cv2.CAP_PROP_FRAME_HEIGHT)), self.max_pixels, what="declares")
        fps = max(get(cv2.CAP_PROP_FPS), 0.0)
        frame_count = max(int(get(cv2.CAP_PROP_FRAME_COUNT)), 0)  # declared, else duration*fps
        # OpenCV reports the clockwise turn; the record gives ffprobe's counter-clockwise one.
        rotation = -int(get(cv2.CAP_PROP_ORIENTATION_META)) % 360 if hasattr(
            cv2, "CAP_PROP_ORIENTATION_META") else 0
        width, height = int(get(cv2.CAP_PROP_FRAME_WIDTH)), int(get(cv2.CAP_PROP_FRAME_HEIGHT))
        num, den = get(cv2.CAP_PROP_SAR_NUM), get(cv2.CAP_PROP_SAR_DEN)
        sar = num / den if num > 0 and den > 0 else 1.0
        # Anamorphic pixels (DVD, HDV) are made square, as the PyAV reader does: the stored
        # width is stretched, which auto-orientation has made the height of a quarter turn.
        self._shown = None
        if sar != 1.0 and 0.25 <= sar <= 4.0:
            if rotation % 180 == 0:
                shown = (max(1, round(width * sar)), height)
            else:
                shown = (width, max(1, round(height * sar)))
            if shown[0] * shown[1] <= self.max_pixels and max(shown) <= MAX_ASPECT_RATIO * min(shown):
                self._shown = shown
                width, height = shown
        return VideoInfo(
            # Already as displayed: OpenCV swaps them when auto-orientation turns the frames.
            width=width, height=height,
            fps=fps, duration_s=frame_count / fps if fps else 0.0, frame_count=frame_count,
            codec=_fourcc(get(cv2.CAP_PROP_FOURCC)), rotation=rotation,
            pixel_format=_fourcc(get(cv2.CAP_PROP_CODEC_PIXEL_FORMAT)),
        )

    def _opened(self) -> cv2.VideoCapture:
        if self._cap is None:  # closed while a read was under way
            raise UsageError(f"{type(self).__name__} for {self.path!r} is closed")
        return self._cap

    def _grab(self) -> float | None:
        cap = self._opened()
        if not cap.grab():
            return None
        return cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0  # pts of the grabbed frame

    def _retrieve(self) -> np.ndarray | None:
        ok, bgr = self._opened().retrieve()
        if not ok or bgr is None:
            return None
        rgb = cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB if bgr.ndim == 2 else cv2.COLOR_BGR2RGB)
        if self._shown is not None and (rgb.shape[1], rgb.shape[0]) != self._shown:
            rgb = cv2.resize(rgb, self._shown, interpolation=cv2.INTER_LINEAR)
        return rgb

    def _seek(self, t_s: float) -> None:
        self._opened().release()
        self._cap = self._capture()
        if not self._cap.isOpened():
            raise InputError(f"OpenCV cannot reopen {self.path!r}", code=ErrorCode.E_DECODE)

    def _release(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()
