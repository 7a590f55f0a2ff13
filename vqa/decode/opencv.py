"""OpenCV decode backend (cv2.VideoCapture over its bundled FFmpeg).

OpenCV cannot say why a file failed to open, so every open failure past the path checks is
E_NOT_VIDEO (an audio-only file included), and it reports no per-packet decode errors.
It never seeks ahead: CAP_PROP_POS_FRAMES lands on approximate frames for many streams, so
runs are reached by decoding forward (grab without colour conversion); a run behind the
decode position is reached by reopening the file, which is exact.
"""
from __future__ import annotations

from typing import ClassVar

import cv2
import numpy as np

from vqa.decode.base import VideoReader
from vqa.errors import InputError
from vqa.types import VideoInfo


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

    def _capture(self) -> cv2.VideoCapture:
        # Thread count passed at open: FFmpeg fixes it when the decoder starts.
        cap = cv2.VideoCapture(self.path, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, self.threads])
        if cap.isOpened():
            cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1)  # the default, made explicit: frames upright
        return cap

    def _open(self) -> VideoInfo:
        self._cap = self._capture()
        if not self._cap.isOpened():
            raise InputError(f"OpenCV cannot open {self.path!r} as a video (not a video, or "
                             "no video stream)", code="E_NOT_VIDEO")
        get = self._cap.get
        fps = max(get(cv2.CAP_PROP_FPS), 0.0)
        frame_count = max(int(get(cv2.CAP_PROP_FRAME_COUNT)), 0)  # declared, else duration*fps
        rotation = int(get(cv2.CAP_PROP_ORIENTATION_META)) % 360 if hasattr(
            cv2, "CAP_PROP_ORIENTATION_META") else 0
        return VideoInfo(
            # Already as displayed: OpenCV swaps them when auto-orientation turns the frames.
            width=int(get(cv2.CAP_PROP_FRAME_WIDTH)), height=int(get(cv2.CAP_PROP_FRAME_HEIGHT)),
            fps=fps, duration_s=frame_count / fps if fps else 0.0, frame_count=frame_count,
            codec=_fourcc(get(cv2.CAP_PROP_FOURCC)), rotation=rotation,
            pixel_format=_fourcc(get(cv2.CAP_PROP_CODEC_PIXEL_FORMAT)),
        )

    def _grab(self) -> float | None:
        if not self._cap.grab():
            return None
        return self._cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0  # pts of the grabbed frame

    def _retrieve(self) -> np.ndarray | None:
        ok, bgr = self._cap.retrieve()
        if not ok or bgr is None:
            return None
        if bgr.ndim == 2:
            return cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB)
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

    def _seek(self, t_s: float) -> None:
        self._cap.release()
        self._cap = self._capture()
        if not self._cap.isOpened():
            raise InputError(f"OpenCV cannot reopen {self.path!r}", code="E_DECODE")

    def _release(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()
