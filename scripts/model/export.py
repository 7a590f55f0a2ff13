"""Export the trained weights to OpenVINO IR and write the model manifest (models/vqa.json).

    python scripts/model/export.py --weights models/vqa-effl0.pt --out models/ --version 1.0.0

The IR takes the preprocessor's output as it is, a uint8 NHWC batch of fragment views: the
element-type and layout conversion is folded into the graph by OpenVINO's PrePostProcessor,
so no float copy of the batch is ever made in Python. The manifest records the sha256 of
every file; the runtime refuses files that do not match.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from vqa.infer.network import QualityNet
from vqa.preprocess import GRID, PATCH, VIEW, WORK_SHORT_SIDE
from vqa.types import MODEL_DEFECTS


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", default="vqa-effl0")
    ap.add_argument("--version", default="2.0.0")
    ap.add_argument("--pytorch-only", action="store_true",
                    help="manifest for the PyTorch weights alone (where OpenVINO is not installed)")
    ap.add_argument("--decision-from", type=Path, default=None,
                    help="the manifest whose decision block the new one starts from (default: OUT/vqa.json's, "
                         "when there is one); scripts/model/calibrate.py --manifest then writes the thresholds")
    a = ap.parse_args()
    source = a.decision_from or a.out / "vqa.json"
    decision = json.loads(source.read_text()).get("decision") if source.exists() else None
    if decision is None:
        raise SystemExit(f"no decision block to start from in {source}: name one with --decision-from")
    net = QualityNet()
    net.load_state_dict(torch.load(a.weights, weights_only=True, map_location="cpu"))
    net.eval()
    files = {"pytorch": a.weights.name}
    if not a.pytorch_only:
        files.update(export_openvino(net, a.out / f"{a.name}.xml"))
    manifest = {
        "name": a.name,
        "version": a.version,
        "outputs": ["score", *MODEL_DEFECTS],
        "input": {"view": "fragments", "grid": GRID, "patch": PATCH, "size": VIEW, "layout": "NHWC",
                  "dtype": "uint8", "channels": "RGB", "work_short_side": WORK_SHORT_SIDE},
        "files": files,
        "sha256": {k: sha256(a.out / f) for k, f in files.items()},
        "decision": decision,
    }
    (a.out / "vqa.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))


def export_openvino(net: QualityNet, xml: Path) -> dict:
    import openvino as ov
    example = torch.rand(2, 3, VIEW, VIEW) * 255
    model = ov.convert_model(net, example_input=example, input=[(-1, 3, VIEW, VIEW)])
    ppp = ov.preprocess.PrePostProcessor(model)
    ppp.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC"))
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    ppp.input().preprocess().convert_element_type(ov.Type.f32)
    model = ppp.build()
    ov.save_model(model, xml, compress_to_fp16=False)

    # The IR must compute what PyTorch computes before it is shipped.
    views = np.random.default_rng(0).integers(0, 256, (4, VIEW, VIEW, 3), dtype=np.uint8)
    with torch.no_grad():
        ref = net(torch.from_numpy(views).permute(0, 3, 1, 2).float()).numpy()
    got = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(views)[0]
    err = float(np.abs(ref - got).max())
    print(f"max |PyTorch - OpenVINO| = {err:.2e}")
    if err > 1e-2:
        raise SystemExit("OpenVINO export disagrees with PyTorch")

    return {"openvino_xml": xml.name, "openvino_bin": xml.with_suffix(".bin").name}


if __name__ == "__main__":
    main()
