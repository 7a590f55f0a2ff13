"""INT8 variant of the OpenVINO model: NNCF post-training quantization.

    python scripts/quantize.py --content ../shared/data/content --models models/

The calibration views are cut from clips rendered and distorted the way make_dataset.py makes
training clips, from *training* stills only (validation content stays unseen), covering every
distortion kind. The INT8 IR is written beside the FP32 one and added to the manifest.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from export import sha256  # noqa: E402
from make_dataset import FRAMES, distorted_clip, draw_spec, split_content  # noqa: E402

from vqa.preprocess import fragments  # noqa: E402


def calibration_views(content: Path, clips: int, seed: int) -> np.ndarray:
    train, _ = split_content(content)
    rng = np.random.default_rng(seed)
    views = []
    for i in range(clips):
        spec = draw_spec(rng, len(train), seed * 7919 + i)
        _, _, dist, _ = distorted_clip(spec, train, np.random.default_rng(spec["seed"]))
        views += [fragments(dist[0]), fragments(dist[FRAMES // 2])]
    return np.stack(views)


def main() -> None:
    import nncf
    import openvino as ov

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, required=True)
    ap.add_argument("--models", type=Path, default=Path("models"))
    ap.add_argument("--clips", type=int, default=150)
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    manifest_path = a.models / "vqa.json"
    manifest = json.loads(manifest_path.read_text())
    views = calibration_views(a.content, a.clips, a.seed)
    print(f"calibration views: {len(views)}", flush=True)
    model = ov.Core().read_model(a.models / manifest["files"]["openvino_xml"])
    dataset = nncf.Dataset(list(views), lambda v: v[None])
    quantized = nncf.quantize(model, dataset, subset_size=len(views), preset=nncf.QuantizationPreset.MIXED)
    xml = a.models / f"{manifest['name']}-int8.xml"
    ov.save_model(quantized, xml, compress_to_fp16=False)
    manifest["files"]["openvino_int8_xml"] = xml.name
    manifest["files"]["openvino_int8_bin"] = xml.with_suffix(".bin").name
    for key in ("openvino_int8_xml", "openvino_int8_bin"):
        manifest["sha256"][key] = sha256(a.models / manifest["files"][key])
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {xml}", flush=True)


if __name__ == "__main__":
    main()
