"""Views and frame statistics straight from NV12 pictures, on the device that holds them.

NVDEC hands back NV12: a full-size luma plane and a half-size plane of interleaved U, V. The
CPU path turns each frame into RGB with swscale and then cuts it (``vqa.preprocess.cut``) and
measures it (``vqa.preprocess.frame_stats``). Here the same work runs in torch on the frame's
own device, so a picture decoded on the GPU need never come back to host memory (issue 34):

- **Colour**: only the pixels a view or a statistic reads are converted, the way swscale's
  unscaled yuv420p -> rgb24 converter does on x86 (the PyAV wheel's FFmpeg): each chroma
  sample serves its 2x2 luma block, limited range, BT.601 unless the stream says BT.709, and
  swscale's 16-bit fixed-point arithmetic (``COEFFICIENTS``), so every pixel is FFmpeg's.
- **Views**: the regions ``vqa.preprocess.patch_layout`` places are gathered into the mosaic
  ``cut`` would have left, and ``vqa.infer.finish.ViewFinisher`` area-resamples it to the view
  on the device (the same code the CUDA inferencer runs on the CPU path's mosaics).
- **Statistics**: the grey of every fourth row and column (OpenCV's RGB2GRAY weights and
  rounding), its histogram for the mean, median and 98th percentile, and the freeze thumbnail
  by area resampling.

Frames whose views are not a mosaic (enlarged frames under the view's size, a frame narrower
than one region) have no NV12 path: ``unsupported`` names the reason, and the caller sends the
video to the CPU path.
"""
from __future__ import annotations

import numpy as np
import torch

from ..preprocess import THUMB, FrameStats, Geometry, area_weights, patch_layout
from .finish import ViewFinisher

# swscale's x86 yuv2rgb, per matrix: luma (Y * 8 - 128) * 9539 >> 16, chroma (C * 8 - 1024),
# and each chroma term (C' * coefficient >> 16) added to it; R takes V, G both, B takes U.
# Found by probing FFmpeg's converter with every luma level and 3,000 random (Y, U, V) triples
# per matrix; they give its output bit for bit (tests/infer/test_nv12.py).
LUMA = (128, 9539)
COEFFICIENTS = {"bt601": (13075, -3209, -6660, 16525), "bt709": (14686, -1747, -4369, 17305)}  # vr, ug, vg, ub
GREY = (9798, 19235, 3735)  # OpenCV's RGB2GRAY in 15-bit fixed point (OpenCV 5: bit for bit)


# FFmpeg's colour spaces (AVColorSpace) -> the matrix swscale converts with; it takes BT.601 for
# a stream that names none (2). A frame of another space is converted on the CPU path.
COLOURSPACES = {1: "bt709", 2: "bt601", 5: "bt601", 6: "bt601"}


def matrix_of(colorspace: int) -> str | None:
    """The matrix of ``COEFFICIENTS`` for an FFmpeg colour space number, or None where there is none."""
    return COLOURSPACES.get(int(colorspace))


def unsupported(height: int, width: int, geometry: Geometry, colorspace: int = 2,
                full_range: bool = False) -> str | None:
    """Why a ``height`` x ``width`` NV12 picture cannot be prepared here, or None."""
    if matrix_of(colorspace) is None:
        return f"colour space {colorspace}"
    if full_range:
        return "full-range picture"
    if height % 2 or width % 2:
        return "odd frame size"
    if not patch_layout(height, width, None, geometry).mosaic:
        return "frame smaller than the view"
    return None


def nv12_of(frame) -> np.ndarray:
    """(H * 3 / 2, W) uint8: a yuv420p frame (PyAV's ``av.VideoFrame``) laid out as NVDEC lays out
    a picture, for measuring this path against the CPU one on frames FFmpeg decoded."""
    y, u, v = (np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width] for p in frame.planes)
    return np.concatenate([y, np.stack([u, v], -1).reshape(u.shape[0], -1)], 0)


def to_rgb(y: torch.Tensor, u: torch.Tensor, v: torch.Tensor, matrix: str = "bt601") -> torch.Tensor:
    """uint8 RGB (..., 3) from limited-range luma and chroma samples of the same shape."""
    vr, ug, vg, ub = COEFFICIENTS[matrix]
    off, gain = LUMA
    yt = torch.div((y.int() * 8 - off) * gain, 65536, rounding_mode="floor")
    uc, vc = u.int() * 8 - 1024, v.int() * 8 - 1024

    def term(c: torch.Tensor, k: int) -> torch.Tensor:
        return torch.div(c * k, 65536, rounding_mode="floor")

    rgb = torch.stack([yt + term(vc, vr), yt + term(uc, ug) + term(vc, vg), yt + term(uc, ub)], -1)
    return rgb.clamp_(0, 255).to(torch.uint8)


def _sample(nv12: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, matrix: str) -> torch.Tensor:
    """RGB at every (row, col) of the grids ``rows`` x ``cols`` of (N, H * 3 / 2, W) NV12 frames."""
    h = nv12.shape[1] * 2 // 3
    y = nv12[:, rows[:, None], cols[None, :]]
    crow = h + rows[:, None] // 2
    ccol = (cols[None, :] // 2) * 2
    return to_rgb(y, nv12[:, crow, ccol], nv12[:, crow, ccol + 1], matrix)


def pool(x: torch.Tensor, fy: int, fx: int) -> torch.Tensor:
    """Area resampling by whole factors, (N, H, W[, C]) uint8 -> (N, H / fy, W / fx[, C]), rounded
    as OpenCV's INTER_AREA rounds these (its fast path): half up for a factor of 2 on both
    axes, half to even otherwise (measured on OpenCV 5; tests/infer/test_nv12.py)."""
    n, h, w = x.shape[:3]
    rest = x.shape[3:]
    s = x.to(torch.int32).reshape(n, h // fy, fy, w // fx, fx, *rest).sum((2, 4))
    area = fy * fx
    if fy == fx == 2:
        return torch.div(s + area // 2, area, rounding_mode="floor").to(torch.uint8)
    return torch.round(s.double() / area).to(torch.uint8)


class NV12Preparer:
    """Views and FrameStats of NV12 frames on one device; keeps each frame size's indices."""

    def __init__(self, geometry: Geometry, device: torch.device | str = "cpu"):
        self.geometry, self.device = geometry, torch.device(device)
        self.finisher = ViewFinisher(geometry, self.device)
        self._cache: dict[tuple, tuple] = {}

    def _mosaic_index(self, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        key = ("mosaic", h, w)
        if key not in self._cache:
            layout = patch_layout(h, w, None, self.geometry)
            g, r = self.geometry.grid, layout.region
            rows = np.empty(g * r, np.int64)
            cols = np.empty(g * r, np.int64)
            # the centred layout is a grid: every region of a row of cells starts on one line
            for i, j, y, x in layout.corners:
                rows[i * r:(i + 1) * r] = np.arange(y, y + r)
                cols[j * r:(j + 1) * r] = np.arange(x, x + r)
            self._cache[key] = (torch.from_numpy(rows).to(self.device), torch.from_numpy(cols).to(self.device), r)
        return self._cache[key]

    def views(self, nv12: torch.Tensor, matrix: str = "bt601") -> torch.Tensor:
        """(N, V, V, 3) uint8 views of (N, H * 3 / 2, W) uint8 NV12 frames of one size."""
        n, h, w = nv12.shape[0], nv12.shape[1] * 2 // 3, nv12.shape[2]
        rows, cols, region = self._mosaic_index(h, w)
        mosaic = _sample(nv12, rows, cols, matrix)
        v, patch = self.geometry.view, self.geometry.patch
        if region == patch:
            return mosaic
        if region % patch == 0:  # 1080p, 2160p: as the decode workers cut them, with OpenCV
            f = region // patch
            return pool(mosaic, f, f)
        out = torch.empty((n, v, v, 3), dtype=torch.uint8, device=nv12.device)
        self.finisher(mosaic.reshape(n, -1), [region] * n, out)
        return out

    def stats(self, nv12: torch.Tensor, matrix: str = "bt601") -> list[FrameStats]:
        """The FrameStats ``vqa.preprocess.frame_stats`` gives for each frame's RGB picture."""
        n, h, w = nv12.shape[0], nv12.shape[1] * 2 // 3, nv12.shape[2]
        key = ("stats", h, w)
        if key not in self._cache:
            rows, cols = torch.arange(0, h, 4), torch.arange(0, w, 4)
            tw, th = THUMB
            ah = torch.from_numpy(area_weights(len(rows), th)).float()  # any sizes, not only squares
            aw = torch.from_numpy(area_weights(len(cols), tw)).float()
            self._cache[key] = tuple(t.to(self.device) for t in (rows, cols, ah, aw))
        rows, cols, ah, aw = self._cache[key]
        rgb = _sample(nv12, rows, cols, matrix).int()
        grey = (rgb[..., 0] * GREY[0] + rgb[..., 1] * GREY[1] + rgb[..., 2] * GREY[2] + (1 << 14)) >> 15
        # one histogram per frame, in one pass: frame k counts its levels in bins 256 k to 256 k + 255
        shift = 256 * torch.arange(n, device=grey.device, dtype=grey.dtype)[:, None, None]
        counts = torch.bincount((grey + shift).flatten(), minlength=256 * n).view(n, 256)
        size = grey[0].numel()
        cumulative = counts.cumsum(1)
        marks = torch.tensor([0.5 * size, 0.98 * size], device=nv12.device, dtype=cumulative.dtype)
        p50, p98 = (torch.searchsorted(cumulative, marks.expand(n, 2).contiguous()).cpu().numpy().T)
        means = (counts.double() @ torch.arange(256, device=nv12.device, dtype=torch.float64) / size).cpu().numpy()
        tw, th = THUMB
        gh, gw = grey.shape[1:]
        if gh % th == 0 and gw % tw == 0:
            thumbs = pool(grey.to(torch.uint8), gh // th, gw // tw).cpu().numpy()
        else:  # OpenCV's general area filter sums in float: a few pixels may round the other way
            thumbs = (ah @ grey.float() @ aw.T).round_().clamp_(0, 255).to(torch.uint8).cpu().numpy()
        return [FrameStats(float(means[k]), float(p98[k]), thumbs[k], luma_p50=float(p50[k])) for k in range(n)]
