"""Views finished on the inferencer's device, from the ring rows ``vqa.preprocess.cut`` left.

A row holds a finished view (cut 0) or the mosaic of a frame's regions, each ``cut`` pixels
square. The mosaic's view is the area resampling of each region to a patch: ``W @ region @ W.T``
per channel, W being ``vqa.preprocess.area_weights``. It runs in float64, so it is exact to
far below the 1 / (2 cut²) by which an output stays away from half-way between two integers
(for odd cuts; see ``area_weights``), and it rounds half to even as OpenCV's conversion does:
the views are the ones the workers would have made (tests/test_finish.py holds it to OpenCV's
on real frames, on the CPU).

Torch alone: the same code runs on the CPU (tests) and on a CUDA stream (vqa.infer.cuda).
"""
from __future__ import annotations

import torch

from ..preprocess import Geometry, area_weights


class ViewFinisher:
    """Finishes rows into views on one device; keeps each region size's weights there."""

    def __init__(self, geometry: Geometry, device: torch.device | str = "cpu"):
        self.geometry, self.device = geometry, torch.device(device)
        self._weights: dict[int, torch.Tensor] = {}

    def weights(self, region: int) -> torch.Tensor:
        w = self._weights.get(region)
        if w is None:
            w = self._weights[region] = torch.from_numpy(area_weights(region, self.geometry.patch)).to(self.device)
        return w

    def __call__(self, rows: torch.Tensor, cuts, out: torch.Tensor) -> None:
        """Write the views of ``rows`` ((N, bytes) uint8) into ``out`` ((N, V, V, 3) uint8), on
        the current stream of ``rows``' device; ``cuts[i]``: row i's region, 0 for a view."""
        grid, v = self.geometry.grid, self.geometry.view
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(cuts):
            groups.setdefault(int(c), []).append(i)
        for region, idx in groups.items():
            # A run of consecutive rows (a folder of one frame size: the whole batch) is a slice.
            sel: slice | torch.Tensor = slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] + 1 == len(idx) \
                else torch.tensor(idx, device=rows.device)
            if region == 0:
                out[sel] = rows[sel, :v * v * 3].reshape(-1, v, v, 3)
                continue
            side = grid * region
            x = rows[sel, :side * side * 3].reshape(-1, grid, region, grid, region, 3).double()
            w = self.weights(region)
            # out[k, a, p, b, q, c] = sum over r, s of w[p, r] * w[q, s] * x[k, a, r, b, s, c]
            y = torch.einsum("pr,karbsc,qs->kapbqc", w, x, w)
            out[sel] = y.round_().clamp_(0, 255).to(torch.uint8).reshape(-1, v, v, 3)
