"""INT8 variant of the OpenVINO model: NNCF post-training quantization with accuracy control.

    python scripts/model/quantize.py --content .device/p_tv --models models/
    python scripts/model/quantize.py --content .device/p_tv --watch heads --max-drop 0.2 \
        --max-iterations 30 --out CANDIDATE/     # a candidate model folder; models/ untouched

The calibration views are cut from clips rendered and distorted the way make_dataset.py makes
training clips, from *training* content only (validation and test content stay unseen),
covering every distortion kind. Accuracy control returns to FP32 the few operations that cost
the most, until the mean of ``points_moved`` to FP32 over the views it watches is at most
MAX_DROP points. ``--watch score``: the score's difference on those views, the shipped INT8
IR's metric (NNCF ranked its operations by output differences then, by this metric now). ``--watch heads``: also what a dark or overexposed head moving across its
threshold would cost the frame (vqa.aggregate's penalty for it at the view's mean luma), over
those views and exposure clips drawn near the brightness at which those heads decide
(``edge_views``). ``--refit-head`` refits the dark and overexposed outputs of the head to the
INT8 features. Neither heads option made a model within 2 points of FP32 on validation
(docs/history/unshipped-models.md, 2026-12-06). ``--bias-correct`` (with ``--watch heads``)
moves only the bias of the dark and overexposed outputs, by their mean shift near the
threshold (``bias_correction``; the rule is fixed there):

    python scripts/model/quantize.py --content .device/p_tv --watch heads \
        --from-int8 models/vqa-effl0-int8.xml --bias-correct --out CANDIDATE/

The classifier head
stays FP32 (its output is scaled by 50). The INT8 IR is written beside the FP32 one and added
to the manifest.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from export import sha256
from make_dataset import FRAMES, distorted_clip, draw_spec, load_content, use_content

from vqa import aggregate as agg
from vqa.preprocess import fragments
from vqa.types import MODEL_DEFECTS

# Points, mean over the calibration views. On the score alone, 0.6 made the first INT8 model
# (1.75x FP32's views/s on 2 cores, up to 2.6 points from FP32 on 343 test-plan clips) and 0.25
# the one shipped 2026-12-02 (1.49x, 1.1 points at most then; model card, section 5).
MAX_DROP = 0.25
# How sharply a head's move across its threshold counts, in logits: a move of this size that
# straddles the threshold counts about half the frame's penalty.
THRESHOLD_WIDTH = 0.25
# Exposure of the edge views, (gain, gamma) ranges: dim pictures round the dark head's
# threshold, bright ones round the overexposed head's (make_dataset draws 0.12-0.55 and 1.6-3.5).
# Ridges tried for refit_head, per view: from close to least squares to FP32's weights with
# only the bias moved.
REFIT_RIDGES = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
EDGE_EXPOSURE = {"dim": ((0.45, 0.8), (1.0, 1.25)), "bright": ((1.2, 2.0), (0.7, 1.0))}
# Bias correction: a logit's shift (INT8 minus FP32) is its mean over the views whose FP32 logit
# lies within BIAS_BAND logits of the manifest's threshold, or over all views where fewer than
# BIAS_MIN_VIEWS do; only BIAS_HEADS have their bias corrected (the others are reported).
BIAS_BAND = 1.0
BIAS_MIN_VIEWS = 30
BIAS_HEADS = ("dark", "overexposed")


def train_sizes(content: Path) -> list[tuple[int, int, str]]:
    """The training content's (width, height, kind), its pictures loaded for distorted_clip."""
    train = load_content(content, "train")
    use_content(content, train)
    return [(e["width"], e["height"], e["kind"]) for e in train]


def calibration_views(content: Path, clips: int, seed: int) -> np.ndarray:
    sizes = train_sizes(content)
    rng = np.random.default_rng(seed)
    views = []
    for i in range(clips):
        spec = draw_spec(rng, sizes, seed * 7919 + i)
        dist = distorted_clip(spec, np.random.default_rng(spec["seed"])).dist
        views += [fragments(dist[0]), fragments(dist[FRAMES // 2])]
    return np.stack(views)


def edge_views(content: Path, clips: int, seed: int) -> np.ndarray:
    """Two views of each of ``clips`` training exposure clips, two dim to one bright, at
    EDGE_EXPOSURE's levels: where the dark and overexposed heads decide."""
    sizes = train_sizes(content)
    rng = np.random.default_rng(seed)
    views = []
    for i in range(clips):
        spec = draw_spec(rng, sizes, seed * 7919 + i, kinds=(("exposure", 1.0),))
        (g0, g1), (y0, y1) = EDGE_EXPOSURE["bright" if i % 3 == 2 else "dim"]
        spec["exposure"] = [float(rng.uniform(g0, g1)), float(rng.uniform(y0, y1))]
        dist = distorted_clip(spec, np.random.default_rng(spec["seed"])).dist
        views += [fragments(dist[0]), fragments(dist[FRAMES // 2])]
    return np.stack(views)


def head_weights(views: np.ndarray, decision: agg.Decision) -> np.ndarray:
    """(N, 2): what a frame like each view loses when the dark, then the overexposed head flags
    it, under vqa.aggregate's rules (0 where the frame's brightness keeps that head silent or
    makes it dark whatever the head says); the view's own mean luma and 98th percentile stand in
    for its frame's."""
    luma = views.reshape(len(views), -1, 3).astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    mean, p98 = luma.mean(axis=1), np.percentile(luma, 98, axis=1)
    dark = (mean > decision.dark_luma_alone) & (mean <= decision.dark_luma_mean)
    over = (p98 >= decision.over_luma_p98) | (mean >= decision.over_luma_mean)
    p = decision.penalties
    return np.stack([np.where(dark, p.dark(mean), 0.0), np.where(over, p.overexposed(mean), 0.0)], axis=1)


def points_moved(out: np.ndarray, ref: np.ndarray, weights: np.ndarray, decision: agg.Decision) -> np.ndarray:
    """Per view, the points a frame's quality moves from FP32's outputs ``ref`` to ``out`` (N, 7):
    the score's difference, plus each of the dark and overexposed heads' penalty times how far
    its output moved across the head's threshold (a logistic step THRESHOLD_WIDTH logits wide)."""
    moved = np.abs(out[:, 0] - ref[:, 0])
    for j, kind in enumerate(("dark", "overexposed")):
        k = 1 + MODEL_DEFECTS.index(kind)
        t = decision.defect_probability[kind]
        at = np.log(t / (1 - t))
        flagged = [1.0 / (1.0 + np.exp(-(z[:, k] - at) / THRESHOLD_WIDTH)) for z in (out, ref)]
        moved = moved + weights[:, j] * np.abs(flagged[0] - flagged[1])
    return moved


def run(compiled, views: np.ndarray, batch: int = 32) -> np.ndarray:
    out = compiled.outputs[0]
    return np.concatenate([compiled(views[i:i + batch])[out] for i in range(0, len(views), batch)]).astype(np.float64)


def _head(model):
    """The classifier head's nodes: the pooled features (ReduceMean), the linear layer's
    MatMul (weights (7, 1280), transposed) and its bias Add."""
    by_type = {o.get_type_name(): o for o in model.get_ordered_ops() if o.get_type_name() in ("ReduceMean", "MatMul")}
    matmul = by_type["MatMul"]
    add = next(i.get_node() for i in matmul.output(0).get_target_inputs())
    return by_type["ReduceMean"], matmul, add


def _with_outputs(model, nodes):
    """A copy of ``model`` that also returns the first output of each of ``nodes`` (by name)."""
    m = model.clone()
    names = {n.get_friendly_name() for n in nodes}
    m.add_outputs([o.output(0) for o in m.get_ordered_ops() if o.get_friendly_name() in names])
    return m


def _set_head(model, w: np.ndarray, b: np.ndarray):
    import openvino as ov

    m = model.clone()
    _, matmul, add = _head(m)
    matmul.input(1).replace_source_output(ov.op.Constant(w.astype(np.float32)).output(0))
    add.input(1).replace_source_output(ov.op.Constant(b.reshape(1, -1).astype(np.float32)).output(0))
    m.validate_nodes_and_infer_types()
    return m


def refit_head(quantized, fp32, views, weights, decision, core, config, ridges=REFIT_RIDGES):
    """``quantized`` with the dark and overexposed outputs of its FP32 classifier head refitted to
    its own INT8 features, each on the views where it decides (``head_weights`` > 0): the least
    squares fit of the FP32 model's output (a logit) on the INT8 model's pooled features, pulled
    towards the FP32 weights by a ridge (a large ridge leaves only the bias to move). The ridge
    is chosen on held-out views (every other pair, i.e. clip, held out) by mean ``points_moved``,
    and the head is then fitted on every view; where no ridge beats the unfitted head there, the
    head stays. The score and the other heads keep their weights. Returns the model and what
    each ridge gave."""
    pool, matmul, add = _head(quantized)
    w0 = matmul.input(1).get_source_output().get_node().get_data().astype(np.float64)
    b0 = add.input(1).get_source_output().get_node().get_data().astype(np.float64).reshape(-1)
    q = core.compile_model(_with_outputs(quantized, [pool]), "CPU", config)
    f = core.compile_model(_with_outputs(fp32, [_head(fp32)[2]]), "CPU", config)
    feats = np.concatenate([q(views[i:i + 32])[q.outputs[1]] for i in range(0, len(views), 32)]).astype(np.float64)
    target = np.concatenate([f(views[i:i + 32])[f.outputs[1]] for i in range(0, len(views), 32)]).astype(np.float64)
    reference = run(core.compile_model(fp32, "CPU", config), views)
    x = np.hstack([feats, np.ones((len(feats), 1))])
    heads = {1 + MODEL_DEFECTS.index(kind): weights[:, j] > 0 for j, kind in enumerate(("dark", "overexposed"))}

    def fit(rows, ridge):
        w, b = w0.copy(), b0.copy()
        for k, decides in heads.items():
            r = rows[decides[rows]]
            pull = np.full(x.shape[1], ridge * len(r))
            pull[-1] = 0.0  # the bias is free
            prior = np.append(w0[k], b0[k])
            theta = np.linalg.solve(x[r].T @ x[r] + np.diag(pull), x[r].T @ target[r, k] + pull * prior)
            w[k], b[k] = theta[:-1], theta[-1]
        return w, b

    held = (np.arange(len(views)) // 2) % 2 == 1
    report = {}
    for ridge in ridges:
        w, b = fit(np.flatnonzero(~held), ridge)
        out = run(core.compile_model(_set_head(quantized, w, b), "CPU", config), views[held])
        report[ridge] = float(points_moved(out, reference[held], weights[held], decision).mean())
    out = run(core.compile_model(quantized, "CPU", config), views[held])
    report["unfitted"] = float(points_moved(out, reference[held], weights[held], decision).mean())
    best = min(ridges, key=lambda r: report[r])
    if report[best] >= report["unfitted"]:  # no ridge does better on held-out views: the head stays
        return quantized, {"held_out_points_moved": report, "ridge": None}
    w, b = fit(np.arange(len(views)), best)
    return _set_head(quantized, w, b), {"held_out_points_moved": report, "ridge": best}


def bias_correction(quantized, fp32, views, decision, core, config, heads=BIAS_HEADS):
    """``quantized`` with the bias of its FP32 classifier head's ``heads`` outputs lowered by the
    shift the INT8 features give their logits, the standard post-training bias correction.

    The rule, fixed before any validation clip was scored with it: each defect logit's shift is
    the mean of INT8 minus FP32 over the ``views`` whose FP32 logit lies within BIAS_BAND logits
    of the manifest's threshold (``decision.defect_probability``), where the head decides, or
    over all views where fewer than BIAS_MIN_VIEWS lie there; the score's is its mean over all
    views. Only ``heads`` are corrected; the weights stay. Returns the model and, per output,
    what was fitted and what is left on the same views."""
    _, matmul, add = _head(quantized)
    w = matmul.input(1).get_source_output().get_node().get_data().astype(np.float64)
    b = add.input(1).get_source_output().get_node().get_data().astype(np.float64).reshape(-1)
    ref = run(core.compile_model(fp32, "CPU", config), views)
    diff = run(core.compile_model(quantized, "CPU", config), views) - ref
    rows, report = {}, {}
    for k, kind in enumerate(("score", *MODEL_DEFECTS)):
        entry = {"views_all": len(views), "shift_all_views": float(diff[:, k].mean())}
        rows[k] = np.ones(len(views), bool)
        if kind != "score":
            t = decision.defect_probability[kind]
            at = float(np.log(t / (1 - t)))
            near = np.abs(ref[:, k] - at) <= BIAS_BAND
            rows[k] = near if near.sum() >= BIAS_MIN_VIEWS else rows[k]
            entry.update(threshold_logit=at, views_near=int(near.sum()), band_used=bool(near.sum() >= BIAS_MIN_VIEWS))
        d = diff[rows[k], k]
        entry.update(views=len(d), shift=float(d.mean()), sd=float(d.std()), se=float(d.std() / np.sqrt(len(d))),
                     corrected=kind in heads)
        if kind in heads:
            b[k] -= entry["shift"]
        report[kind] = entry
    corrected = _set_head(quantized, w, b)
    after = run(core.compile_model(corrected, "CPU", config), views) - ref
    for k, kind in enumerate(("score", *MODEL_DEFECTS)):
        report[kind].update(residual=float(after[rows[k], k].mean()),
                            mean_abs_before=float(np.abs(diff[rows[k], k]).mean()),
                            mean_abs_after=float(np.abs(after[rows[k], k]).mean()))
    return corrected, report


def quantize(nncf, model, views, checked, reference, weights, decision, a):
    """NNCF's quantization of ``model`` with statistics from ``views`` and accuracy control on
    the mean ``points_moved`` over ``checked``."""
    from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters

    def agreement(compiled, items) -> tuple[float, list[float]]:
        # 100 minus the points moved from FP32 (NNCF divides by the FP32 metric, so not 0): the
        # mean, and each view's, by which NNCF ranks the operations to return to FP32.
        items = list(items)
        out = run(compiled, np.stack([v for v, _, _ in items]))
        each = 100.0 - points_moved(out, np.stack([r for _, r, _ in items]), np.stack([w for _, _, w in items]),
                                    decision)
        return float(each.mean()), [float(x) for x in each]

    return nncf.quantize_with_accuracy_control(
        model, nncf.Dataset(list(views), lambda v: v[None]),
        nncf.Dataset(list(zip(checked, reference, weights)), lambda item: item[0][None]),
        validation_fn=agreement, max_drop=a.max_drop, drop_type=nncf.DropType.ABSOLUTE,
        subset_size=len(views), preset=nncf.QuantizationPreset.MIXED, fast_bias_correction=False,
        ignored_scope=nncf.IgnoredScope(types=["MatMul"]),
        advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(
            max_num_iterations=a.max_iterations))


def main() -> None:
    import nncf
    import openvino as ov

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--content", type=Path, required=True)
    ap.add_argument("--models", type=Path, default=Path("models"))
    ap.add_argument("--clips", type=int, default=150)
    ap.add_argument("--watch", choices=("score", "heads"), default="score",
                    help="what accuracy control watches: the score alone (how the shipped INT8 IR was made), or "
                         "points_moved over the mix and the edge views (tried 2026-12-06, not shipped)")
    ap.add_argument("--edge-clips", type=int, default=150,
                    help="exposure clips near the heads' thresholds, which accuracy control also watches")
    ap.add_argument("--max-iterations", type=int, default=sys.maxsize,
                    help="accuracy control's most operations returned to FP32 (default: no limit)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--max-drop", type=float, default=MAX_DROP,
                    help=f"accuracy control's limit, mean points_moved on the calibration views (default {MAX_DROP})")
    ap.add_argument("--out", type=Path, default=None,
                    help="write a candidate model folder here (its manifest, the INT8 IR, links to the rest) "
                         "and leave --models alone")
    ap.add_argument("--measure", type=Path, default=None,
                    help="only print an INT8 IR's points_moved on the calibration views, and exit")
    ap.add_argument("--from-int8", type=Path, default=None,
                    help="take this INT8 IR instead of quantizing (with --refit-head: refit its head)")
    ap.add_argument("--refit-head", action="store_true",
                    help="refit the FP32 classifier head to the INT8 features (refit_head)")
    ap.add_argument("--bias-correct", action="store_true",
                    help="lower the bias of the dark and overexposed outputs by their INT8 shift near the threshold, "
                         "on the mix and the edge views (bias_correction); its fit goes to bias_correction.json")
    a = ap.parse_args()
    if a.refit_head and a.watch != "heads":
        ap.error("--refit-head fits on the views where the heads decide: add --watch heads")
    if a.bias_correct and a.watch != "heads":
        ap.error("--bias-correct fits on the mix and the edge views: add --watch heads")
    manifest = json.loads((a.models / "vqa.json").read_text())
    decision = agg.Decision.from_manifest(manifest["decision"])
    views = calibration_views(a.content, a.clips, a.seed)
    if a.watch == "score":  # how the shipped INT8 IR was made: the score on the mix's views
        checked = views
        weights = np.zeros((len(views), 2))
    else:  # the statistics come from the mix alone; accuracy control also watches the edge views
        checked = np.concatenate([views, edge_views(a.content, a.edge_clips, a.seed + 1)])
        weights = head_weights(checked, decision)
    print(f"calibration views: {len(views)}; checked: {len(checked)}, {int((weights[:, 0] > 0).sum())} where the "
          f"dark head counts, {int((weights[:, 1] > 0).sum())} the overexposed one", flush=True)
    core = ov.Core()
    model = core.read_model(a.models / manifest["files"]["openvino_xml"])
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    reference = run(core.compile_model(model, "CPU", config), checked)
    if a.measure:
        moved = points_moved(run(core.compile_model(str(a.measure), "CPU", config), checked), reference, weights,
                             decision)
        print(f"{a.measure}: points_moved mean {moved.mean():.3f}, max {moved.max():.2f}")
        return

    if a.from_int8:
        quantized = core.read_model(a.from_int8)
    else:
        quantized = quantize(nncf, model, views, checked, reference, weights, decision, a)
    if a.refit_head:
        quantized, report = refit_head(quantized, model, checked, weights, decision, core, config)
        print(f"head refitted: {json.dumps(report)}", flush=True)
    fit = None
    if a.bias_correct:
        quantized, fit = bias_correction(quantized, model, checked, decision, core, config)
        print(f"bias corrected: {json.dumps(fit, indent=1)}", flush=True)
    folder = a.out or a.models
    if a.out:  # a model folder of its own: the manifest and the other files, linked
        folder.mkdir(parents=True, exist_ok=True)
        for key, name in manifest["files"].items():
            if not key.startswith("openvino_int8") and not (folder / name).exists():
                (folder / name).symlink_to((a.models / name).resolve())
    xml = folder / f"{manifest['name']}-int8.xml"
    for old in (xml, xml.with_suffix(".bin")):  # never write through a link
        if old.is_symlink():
            old.unlink()
    ov.save_model(quantized, xml, compress_to_fp16=False)
    manifest["files"]["openvino_int8_xml"] = xml.name
    manifest["files"]["openvino_int8_bin"] = xml.with_suffix(".bin").name
    for key in ("openvino_int8_xml", "openvino_int8_bin"):
        manifest["sha256"][key] = sha256(folder / manifest["files"][key])
    (folder / "vqa.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if fit is not None:
        record = {"command": "python " + " ".join(sys.argv), "from_int8": str(a.from_int8) if a.from_int8 else None,
                  "views": {"mix": len(views), "edge": len(checked) - len(views)}, "band_logits": BIAS_BAND,
                  "min_views": BIAS_MIN_VIEWS, "heads": list(BIAS_HEADS), "fit": fit,
                  "sha256": {k: manifest["sha256"][k] for k in ("openvino_int8_xml", "openvino_int8_bin")}}
        (folder / "bias_correction.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {xml}", flush=True)


if __name__ == "__main__":
    main()
