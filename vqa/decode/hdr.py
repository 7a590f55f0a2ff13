"""HDR frames (PQ and HLG transfer), mapped to the SDR picture the network was trained on.

An HDR stream's code values are not SDR's: PQ (SMPTE ST 2084, HDR10) codes absolute light up
to 10,000 cd/m2, HLG (ARIB STD-B67, a phone's HDR video) codes scene light on a log curve
above its middle. Read as SDR, the picture is dim and flat: a clip scored 6 points above its
SDR original as PQ, 4 as HLG. A player tone-maps it for an SDR screen; so does this module.

Each channel's code value (16-bit, from swscale) goes through one table: to light relative to
HDR reference white (203 cd/m2, ITU-R BT.2408; HLG's reference white is its 75% signal, with
the 1.2 system gamma of a 1000 cd/m2 display), through a knee that keeps everything below
``KNEE`` of reference white and rolls the highlights off towards SDR white, and back to
code values with BT.1886's 2.4 gamma. Per channel and without a gamut conversion from
BT.2020 (colours come out a little less saturated than a player shows them), so it is one
table lookup a frame. Numpy only.
"""
from __future__ import annotations

import functools

import numpy as np

TRC_PQ = 16  # AVCOL_TRC_SMPTE2084, FFmpeg's (and H.273's) number
TRC_HLG = 18  # AVCOL_TRC_ARIB_STD_B67
HDR_TRANSFERS = (TRC_PQ, TRC_HLG)
REFERENCE_WHITE_NITS = 203.0  # ITU-R BT.2408: HDR reference white, shown as SDR white
KNEE = 0.75  # share of reference white below which light is kept as it is
SDR_GAMMA = 2.4  # BT.1886


def _pq_to_relative(v: np.ndarray) -> np.ndarray:
    m1, m2 = 2610 / 16384, 2523 / 4096 * 128
    c1, c2, c3 = 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32
    p = np.power(v, 1 / m2)
    nits = 10000 * np.power(np.maximum(p - c1, 0) / (c2 - c3 * p), 1 / m1)
    return nits / REFERENCE_WHITE_NITS


def _hlg_to_relative(v: np.ndarray) -> np.ndarray:
    a, b, c = 0.17883277, 0.28466892, 0.55991073

    def scene(x: np.ndarray) -> np.ndarray:
        return np.where(x <= 0.5, x * x / 3, (np.exp((x - c) / a) + b) / 12)

    return np.power(scene(v) / scene(np.array(0.75)), 1.2)


@functools.lru_cache(maxsize=2)
def _table(trc: int) -> np.ndarray:
    """65,536 entries: a 16-bit HDR code value -> its 8-bit SDR code value."""
    v = np.arange(65536, dtype=np.float64) / 65535
    light = _pq_to_relative(v) if trc == TRC_PQ else _hlg_to_relative(v)
    # Above the knee, highlights approach SDR white smoothly (slope 1 at the knee).
    rolled = KNEE + (1 - KNEE) * (1 - np.exp(-(light - KNEE) / (1 - KNEE)))
    light = np.clip(np.where(light <= KNEE, light, rolled), 0.0, 1.0)
    return np.round(255 * np.power(light, 1 / SDR_GAMMA)).astype(np.uint8)


def to_sdr(rgb48: np.ndarray, trc: int) -> np.ndarray:
    """(H, W, 3) uint16 R'G'B' coded with transfer ``trc`` (one of HDR_TRANSFERS) -> uint8 SDR."""
    return _table(trc)[rgb48]
