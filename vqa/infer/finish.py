"""Views finished on the inferencer's device, from the ring rows ``vqa.preprocess.cut`` left.

A row holds a finished view (cut 0) or the mosaic of a frame's regions, each ``cut`` pixels
square. The mosaic's view is the area resampling of each region to a patch: ``W @ region @ W.T``
per channel, W being ``vqa.preprocess.area_weights``. Every weight is k / region, so the sum
runs on the integer weights ``K = region * W`` and is divided by region² at the end: each
partial sum is an integer below 255 * 48² < 2**24, which float32 holds exactly in any order of
summation. The quotient is then rounded half to even as OpenCV's conversion does, and it is
never half-way: with g = gcd(region, patch), every K is a multiple of g, so the quotient is an
integer over (region / g)², an odd number (patch 32 holds every factor 2 of a region up to 63).
It is thus at least 1 / (2 * 47²) from half-way for regions up to 48, far more than the last-bit
error of the division (CUDA multiplies by the reciprocal of a Python divisor). The views are the
ones the workers would have made: tests/infer/test_finish_views.py holds them to OpenCV's on the CPU, and
tests/infer/test_cuda_device.py on the GPU. TF32 matmuls would round the partial sums, so where torch
allows them the same sums run in float64.

Torch alone: the same code runs on the CPU (tests) and on a CUDA stream (vqa.infer.cuda).
"""
from __future__ import annotations

import numpy as np
import torch

from ..preprocess import Geometry, area_weights


def exact_dtype() -> torch.dtype:
    """float32 where torch's float32 matmuls are IEEE float32 (its default), else float64."""
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
    return torch.float64 if tf32 else torch.float32


class ViewFinisher:
    """Finishes rows into views on one device; keeps each region size's weights there."""

    def __init__(self, geometry: Geometry, device: torch.device | str = "cpu"):
        self.geometry, self.device = geometry, torch.device(device)
        self._weights: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def weights(self, region: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """``region`` times the area weights, integers: K (patch, region) for the rows, and for
        the columns, whose channels are interleaved, kron(K.T, I3) (region * 3, patch * 3)."""
        w = self._weights.get((region, dtype))
        if w is None:
            k = np.rint(area_weights(region, self.geometry.patch) * region)
            w = self._weights[(region, dtype)] = (torch.from_numpy(k).to(self.device, dtype),
                                                  torch.from_numpy(np.kron(k.T, np.eye(3))).to(self.device, dtype))
        return w

    def __call__(self, rows: torch.Tensor, cuts, out: torch.Tensor) -> None:
        """Write the views of ``rows`` ((N, bytes) uint8) into ``out`` ((N, V, V, 3) uint8), on
        the current stream of ``rows``' device; ``cuts[i]``: row i's region, 0 for a view."""
        grid, v = self.geometry.grid, self.geometry.view
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(cuts):
            groups.setdefault(int(c), []).append(i)
        dtype = exact_dtype()
        for region, idx in groups.items():
            # A run of consecutive rows (a folder of one frame size: the whole batch) is a slice.
            sel: slice | torch.Tensor = slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] + 1 == len(idx) \
                else torch.tensor(idx, device=rows.device)
            if region == 0:
                out[sel] = rows[sel, :v * v * 3].reshape(-1, v, v, 3)
                continue
            side, (k, k_cols) = grid * region, self.weights(region, dtype)
            # The mosaic's rows of regions, (n * a, r, [b, s, c]): no copy but the conversion.
            x = rows[sel, :side * side * 3].reshape(-1, region, side * 3).to(dtype)
            y = k @ x  # (n * a, p, [b, s, c]): the rows, one matmul per row of regions
            y = y.reshape(-1, region * 3) @ k_cols  # ([n, a, p, b], [q, c]): the columns
            # Every sum is at most 255 * region²: no clamp. A slice's copy converts to uint8.
            y = y.div_(region * region).round_().reshape(-1, v, v, 3)
            if isinstance(sel, slice):
                out[sel].copy_(y)
            else:
                out[sel] = y.to(torch.uint8)
