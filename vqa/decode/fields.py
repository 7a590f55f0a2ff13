"""Interlaced frames, made progressive before they are judged.

An interlaced frame holds two fields, its even and its odd lines, taken a field period apart
(1/50 s in 1080i50). Where the picture moves, the two disagree and the frame is combed: a
player deinterlaces it, and the network, shown the comb, reads it as damage (a panned clip
woven from two instants scored 42 where its progressive frames score 99).

``deinterlace`` keeps the even field and, in the blocks that are combed, replaces each odd
line by one interpolated from the even lines around it. A block is combed where its lines
differ more from their neighbours (the other field) than those neighbours differ from each
other (the same field): in a progressive picture the nearest lines are the most alike. A
progressive picture flagged interlaced (PsF, most "1080i" film) is left as it is. Numpy only.
"""
from __future__ import annotations

import numpy as np

BLOCK = 16  # pixels a side of the blocks judged combed or not


def _combed_rows(rgb: np.ndarray, block: int) -> np.ndarray:
    """(height, width) bool: the pixels of the blocks whose lines disagree with both of their
    neighbours more than the neighbours disagree with each other."""
    h, w = rgb.shape[:2]
    y = rgb[..., 1].astype(np.int16)  # green: most of luma, a third of the work
    across = np.abs(y[1:-1] - y[:-2]) + np.abs(y[1:-1] - y[2:])  # a line against the other field
    within = 2 * np.abs(y[2:] - y[:-2])  # the two neighbours against each other (one field)
    rows, cols = max(1, (h - 2) // block), max(1, w // block)
    bh, bw = (h - 2) // rows, w // cols
    shape = (rows, bh, cols, bw)
    cut = (slice(0, rows * bh), slice(0, cols * bw))
    combed = (across[cut].reshape(shape).sum(axis=(1, 3), dtype=np.int64)
              > within[cut].reshape(shape).sum(axis=(1, 3), dtype=np.int64))
    # Block rows and columns are stretched over the remainder so every pixel has a block.
    row_of = np.minimum(np.maximum(np.arange(h) - 1, 0) // bh, rows - 1)  # ``across`` starts at line 1
    col_of = np.minimum(np.arange(w) // bw, cols - 1)
    return combed[row_of][:, col_of]


def deinterlace(rgb: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """``rgb`` (H, W, 3) uint8 with its combed blocks' odd lines interpolated from the even
    field; the same array when no block is combed or the frame is under 4 lines."""
    h = rgb.shape[0]
    if h < 4:
        return rgb
    mask = _combed_rows(rgb, block)
    odd = mask[1::2]
    if not odd.any():
        return rgb
    even = rgb[0::2].astype(np.int16)
    # Each odd line from the two even lines either side of it and the two beyond (cubic:
    # -1, 9, 9, -1 over 16), the field's edges repeated.
    padded = np.concatenate([even[:1], even, even[-1:], even[-1:]])
    n = h // 2
    between = np.clip((9 * (padded[1:n + 1] + padded[2:n + 2]) - padded[:n] - padded[3:n + 3] + 8) >> 4,
                      0, 255).astype(np.uint8)
    out = rgb.copy()
    out[1::2] = np.where(odd[..., None], between, rgb[1::2])
    return out
