"""Make the docs' tables from their one source: the codes (vqa.codes), the record (vqa.types,
vqa.report), every command's flags (the click commands and ScoreOptions), the model's numbers
(models/metrics.json) and the measured speeds (docs/performance/results/).

    python scripts/docs/tables.py           # write docs/_generated/*.md and the README's table
    python scripts/docs/tables.py --check   # write nothing; exit 1 naming each file that differs

The pages include the files of docs/_generated/ (pymdownx.snippets), and the README holds its
headline table between two markers, so a page that disagrees with the code is a failing check
(tests/test_docs.py), not a stale sentence. It imports the installed vqa, as any user would.

Long because every generated table lives here, one function each: a number on any page has one
maker, and the README's headline rows read the same files as the pages they link to.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import click

import vqa
from vqa.cli.app import cli
from vqa.codes import ErrorCode, WarningCode, markdown_table
from vqa.config import ScoreOptions, cli_fields
from vqa.job import FolderJob
from vqa.report import CONTRACT_SCHEMA, CSV_COLUMNS
from vqa.serve.settings import ServeSettings
from vqa.types import VideoInfo, VideoScore

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "_generated"
RESULTS = ROOT / "docs" / "performance" / "results"
README_START, README_END = "<!-- headline table: scripts/docs/tables.py -->", "<!-- end of headline table -->"

# The runs each Performance table is made from: the latest of each machine class. Add a run
# here when one is made; the numbers come from its files.
H200_STARTS = ("h200-2026-12-02-speed/first", "h200-2026-12-02-speed/second", "h200-2026-12-02-speed/third")
TWO_CORE_BENCH = "bench-2core.json"
TWO_CORE_COMMAND = "command_turns-2core-2026-12-02.jsonl"
TWO_CORE_SERVICE = "bench-serve-2core-final.json"


def cell(text: Any) -> str:
    """One table cell: whitespace folded, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- the record ---------------------------------------------------------------------------

def docstring_fields(cls: type) -> dict[str, str]:
    """The ``Fields:`` section of a class docstring: name -> its text."""
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Fields:", 1)[1] if "Fields:" in doc else ""
    out: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        m = re.match(r"^    (\w+): (.*)$", line)
        if m:
            name, out[m.group(1)] = m.group(1), m.group(2)
        elif name and line.startswith("        "):
            out[name] += " " + line.strip()
        elif line.strip() and not line.startswith(" "):
            break
    return out


def record_fields() -> str:
    meaning = docstring_fields(VideoScore)
    keys_of = {"defects": list(CONTRACT_SCHEMA["properties"]["defects"]["items"]["properties"]),
               "video": list(VideoInfo(0, 0, 0.0, 0.0, 0, "").to_dict()),
               "error": ["code", "message"]}
    for column in CSV_COLUMNS:  # frames_sampled, model_name, ...: the nested objects' keys
        obj, _, key = column.partition("_")
        if key and obj in ("frames", "model", "config", "sampling"):
            keys_of.setdefault(obj, []).append(key)
    rows = []
    for f in dataclasses.fields(VideoScore):
        keys = keys_of.get(f.name)
        sub = f" Keys: {', '.join(f'`{k}`' for k in keys)}." if keys else ""
        rows.append([f"`{f.name}`", f"`{f.type}`", meaning.get(f.name, "") + sub])
    return table(["field", "Python type", "meaning"], rows)


def csv_columns() -> str:
    return ", ".join(f"`{c}`" for c in CSV_COLUMNS) + "\n"


# --- the commands -------------------------------------------------------------------------

def python_name(command: str, name: str) -> str:
    """Where a script sets what a flag sets."""
    options = {f.name for f in cli_fields()}
    if name in options:
        return f"`ScoreOptions.{name}`"
    if command == "score":
        if name in inspect.signature(FolderJob.__init__).parameters:
            return f"`run_folder_job(..., {name}=)`"
        if name in ("engine", "actors_per_node"):
            return f"`open_scorer({name}=)`"
    if command == "serve":
        settings = [f.name for f in dataclasses.fields(ServeSettings)]
        stem = re.sub(r"_(kb|mb)$", "", name)
        match = [s for s in settings if s == name or s.startswith(stem + "_") or s == stem]
        if match:
            return f"`ServeSettings.{match[0]}`"
    return "(command line only)"


def default_text(param: click.Parameter) -> str:
    default = param.default
    if isinstance(default, bool) or not isinstance(default, (str, int, float)):
        return ""  # flags, None, and click's marker for "no default"
    return f"`{default}`"


def command_flags(name: str) -> str:
    command = cli.commands[name]
    rows = []
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        flags = ", ".join(f"`{f}`" for f in [*param.opts, *param.secondary_opts])
        choices = getattr(param.type, "choices", None)
        what = param.help or ""
        if choices:
            what += " Choices: " + ", ".join(f"`{c}`" for c in choices) + "."
        rows.append([flags, python_name(name, param.name or ""), default_text(param), what])
    return table(["flag", "in Python", "default", "what"], rows)


def score_options() -> str:
    rows = []
    for f in dataclasses.fields(ScoreOptions):
        flag = f.metadata.get("flag")
        default = f.default if f.default is not dataclasses.MISSING else ""
        rows.append([f"`{f.name}`", f"`{flag}`" if flag else "", f"`{default!r}`"])
    return table(["field", "flag", "default"], rows)


# --- the modules ---------------------------------------------------------------------------

def modules() -> str:
    """Each module of the package with the first sentence of its docstring, read from the
    source (an optional backend's module need not import)."""
    import ast
    import pkgutil

    rows = []
    infos = [m for m in pkgutil.walk_packages(vqa.__path__, "vqa.", onerror=lambda _name: None)]
    paths = {"vqa": Path(vqa.__file__)}
    for info in infos:
        base = Path(info.module_finder.path)
        leaf = info.name.rsplit(".", 1)[-1]
        paths[info.name] = base / leaf / "__init__.py" if info.ispkg else base / f"{leaf}.py"
    for name in sorted(paths):
        if name.rsplit(".", 1)[-1].startswith("_"):
            continue  # private modules: their package's docstring speaks for them
        doc = ast.get_docstring(ast.parse(paths[name].read_text())) or ""
        paragraph = " ".join(doc.split("\n\n")[0].split())
        first = re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0].rstrip(":")
        rows.append([f"`{name}`", first])
    return table(["module", "what it holds"], rows)


# --- the model ----------------------------------------------------------------------------

def shipped_version() -> str:
    return json.loads((ROOT / "models" / "vqa.json").read_text())["version"]


def shipped_major() -> int:
    """The major version of the model models/vqa.json ships: its numbers are targets.model_N."""
    return int(shipped_version().split(".")[0])


def metrics() -> dict:
    return json.loads((ROOT / "models" / "metrics.json").read_text())


def model_numbers() -> list[tuple[str, str, str]]:
    """(measure, shipped model, the model before it) from models/metrics.json."""
    m = metrics()
    # the network's own numbers: the newest weights measured (4.0.0 kept 3.0.0's network)
    measured = sorted(int(k.split("_")[1]) for k in m["targets"]
                      if k.startswith("model_") and int(k.split("_")[1]) <= shipped_major())
    if not measured:
        raise SystemExit(f"models/metrics.json has no targets.model_N for the shipped model ({shipped_major()})")
    now, before = m["targets"][f"model_{measured[-1]}"], m["targets"].get(f"model_{measured[-1] - 1}")

    def both(fmt) -> tuple[str, str]:
        return fmt(now), (fmt(before) if before else "")

    int8 = m["int8_vs_fp32"]
    return [
        ("Score against VMAF across contents, SRCC ({} technical clips)".format(now["srcc_vs_vmaf_technical"]["clips"]),
         *both(lambda t: f"{t['srcc_vs_vmaf_technical']['value']:.3f}")),
        ("Distortion ladders strictly falling from the clean clip",
         *both(lambda t: f"{100 * t['ladders_falling_from_clean']['all_families']:.1f}%")),
        ("Category within one class of the viewer's VMAF band",
         *both(lambda t: f"{100 * t['category_within_one_band']['viewer_vmaf']:.1f}%")),
        ("Clean real pictures given a defect",
         *both(lambda t: f"{t['clean_real_with_a_defect']['flagged']} of {t['clean_real_with_a_defect']['clips']}")),
        ("Real noisy photos (PolyU) reported as noise",
         *both(lambda t: f"{100 * t['polyu_pairs']['noisy_reported_noise']:.0f}%")),
        ("Defect macro-F1, eight types", f"{m['macro_f1_eight_types']:.3f}", ""),
        ("INT8 against FP32, points of score, mean / max",
         f"{int8['mean_abs_score_diff']:.2f} / {int8['max_abs_score_diff']:.1f}", ""),
    ]


def manifest_blocks() -> str:
    """The manifest's input and decision blocks as models/vqa.json holds them."""
    manifest = json.loads((ROOT / "models" / "vqa.json").read_text())
    blocks = {key: manifest[key] for key in ("name", "version", "input", "decision") if key in manifest}
    return "```json\n" + json.dumps(blocks, indent=2) + "\n```\n"


def model_table() -> str:
    m = metrics()
    clips = max(t["clips"] for k, t in m["targets"].items() if k.startswith("model_"))
    rows = [[measure, f"**{now}**", before] for measure, now, before in model_numbers()]
    bounds = m["category_bounds"]["new"]
    rows.append(["Category within one class, bounds chosen on validation "
                 f"({bounds['clips']} clips)", f"**{100 * bounds['viewer_vmaf']:.1f}%**", ""])
    measured = max(int(k.split("_")[1]) for k in m["targets"] if k.startswith("model_"))
    return (table(["measure", f"version {measured}'s network", "the one before"], rows)
            + f"\nTest set: {clips} clips never used in training or model selection; "
              "every number is in `models/metrics.json`. The network's figures, measured under "
              f"version {measured}'s decision block; the shipped {shipped_version()} is measured "
              "on the judgement sets (below).\n")


# decide.py measure's output for the shipped model (its network's frames, its decisions), on
# validation and test; beside it int8.json (decide.py compare --other int8) and resolution.json
# (evaluate.py local). The model before it is read from its own measurement (JUDGEMENT_BEFORE: its
# network's frames), and the GPU's rows were measured on the GPU machine under 4.0.0 (JUDGEMENT_GPU).
JUDGEMENT = ROOT / "docs" / "model" / "results" / "judgement-v4" / "2026-12-07-distill" / "targets.json"
JUDGEMENT_BEFORE = ROOT / "docs" / "model" / "results" / "judgement-v4" / "2026-12-06-ramp" / "targets.json"
JUDGEMENT_GPU = ROOT / "docs" / "model" / "results" / "judgement-v4" / "2026-12-05"


def _low_light(t: dict, whole_folder: bool) -> str:
    """Low-light photos found dark: the scenes (judgement.LOW_LIGHT_SCENES), or the whole folder."""
    found = t["low_light_folder_found_dark" if whole_folder else "low_light_found_dark"]
    return f"{100 * found['share']:.0f}% of {found['clips']}"


# issue 32's targets: (measure, goal, how to read it from decide.py measure's output for one set)
JUDGEMENT_ROWS: list[tuple[str, str, Any]] = [
    ("score against VMAF, SRCC, every family with a reference", ">= 0.80",
     lambda t: f"{t['srcc_vs_vmaf_every_family']:.3f}"),
    ("the same, spatial and coding families without noise", ">= 0.94",
     lambda t: f"{t['srcc_vs_vmaf_spatial_coding']:.3f}"),
    ("category is the band of the score", "100%", lambda t: f"{100 * t['category_is_band_of_score']:.0f}%"),
    ("category within one class of the VMAF band", ">= 95%",
     lambda t: f"{100 * t['category_within_one_vmaf_band']:.1f}%"),
    ("clean real pictures given a defect", "<= 5%",
     lambda t: "{flagged} of {clips} ({p:.1f}%)".format(p=100 * t["clean_real_with_a_defect"]["share"],
                                                          **t["clean_real_with_a_defect"])),
    ("photos of low-light scenes found dark", ">= 75%", lambda t: _low_light(t, whole_folder=False)),
    ("real defects (blur, noise, dark), pooled F1", ">= 0.92", lambda t: f"{t['real_defects_f1']['pooled']:.3f}"),
    ("noise ladders strictly falling from the clean clip", ">= 90%",
     lambda t: f"{100 * t['noise_ladders_falling']:.0f}%"),
    ("every photo of the low-light folder found dark, daylight photos too", "", lambda t: _low_light(t, True)),
]


def judgement_decisions(res: dict) -> list[str]:
    """The decisions a targets file measured, the shipped one first."""
    return [k for k in res if k != "command"]


def _int8(folder: Path) -> dict:
    return json.loads((folder / "int8.json").read_text())


def judgement_table() -> str:
    """Issue 32's targets: the shipped model and the one before it, each on validation and test
    through its own network; then the targets to keep."""
    res, before = json.loads(JUDGEMENT.read_text()), json.loads(JUDGEMENT_BEFORE.read_text())
    shipped, old = judgement_decisions(res)[0], judgement_decisions(before)[0]
    columns = [(f"{name}, {s}", r[name][s]) for name, r in ((shipped, res), (old, before)) for s in ("validation", "test")]
    rows = [[name, goal, *(read(t) for _, t in columns)] for name, goal, read in JUDGEMENT_ROWS]
    rows.append(["INT8 against FP32, mean / max points (keep)", "<= 0.5 / <= 2",
                 *(f"{i[s]['mean_abs_score_diff']:.2f} / {i[s]['max_abs_score_diff']:.1f}"
                   for i in (_int8(JUDGEMENT.parent), _int8(JUDGEMENT_BEFORE.parent)) for s in ("validation", "test"))])
    for other in ("cuda-fp16", "cuda-fp32"):  # on the GPU machine, part of the test clips
        gpu = json.loads((JUDGEMENT_GPU / f"{other}.json").read_text())["test"]
        rows.append([f"`{other.replace('-', ':')}` against the CPU (openvino:fp32), mean / max points, "
                     f"same category ({gpu['clips']} test clips, 4.0.0's network and decisions)", "", "", "", "",
                     f"{gpu['mean_abs_score_diff']:.2f} / {gpu['max_abs_score_diff']:.1f}, "
                     f"{100 * gpu['same_category']:.1f}%"])

    def spread(folder: Path) -> tuple[int, str]:
        photos = {k: v for k, v in json.loads((folder / "resolution.json").read_text())["resolution"].items()
                  if "/" in k}  # the real photos (the drawn pictures aside)
        return len(photos), f"{max(v['spread'] for v in photos.values()):.1f}"
    (n, now), (_, then) = spread(JUDGEMENT.parent), spread(JUDGEMENT_BEFORE.parent)
    rows.append([f"one real photo at 720p, 1080p and 2160p, largest spread of {n} (keep)", "<= 3", "", now, "", then])
    sizes = "; ".join(f"{s}: {res[shipped][s]['clips']} clips, {res[shipped][s]['ladders']} ladders, "
                      f"{res[shipped][s]['sources']} sources" for s in ("validation", "test"))
    return (table(["measure", "target", *(c for c, _ in columns)], rows)
            + f"\n{sizes}, the same clips for both models. `{res['command']}`; `{before['command']}`\n")


# This session's retrained candidate (make_dataset --mix v7), not shipped: decide.py measure's
# output for it (its own fitted decisions, then 4.0.0's), and the rule's choice on validation.
CANDIDATE_V7 = JUDGEMENT.parent.parent / "2026-12-06"


def candidate_v7_table() -> str:
    """Issue 32's targets for the mix-v7 network beside the shipped 4.0.0 on the same clips."""
    cand = json.loads((CANDIDATE_V7 / "candidates" / "lr3e-4_targets.json").read_text())
    # the shipped model measured on the same clips (the ladders were made again for this session)
    shipped = json.loads((CANDIDATE_V7 / "candidates" / "shipped_targets.json").read_text())
    name = judgement_decisions(shipped)[0]
    own, theirs = judgement_decisions(cand)
    columns = [(f"shipped {name}, validation", shipped[name]["validation"]), (f"shipped {name}, test", shipped[name]["test"]),
               ("mix v7, its fit, validation", cand[own]["validation"]), ("mix v7, its fit, test", cand[own]["test"]),
               (f"mix v7, {name}'s decisions, test", cand[theirs]["test"])]
    rows = [[label, goal, *(read(t) for _, t in columns)] for label, goal, read in JUDGEMENT_ROWS]
    choice = json.loads((CANDIDATE_V7 / "choice.json").read_text())
    met = {k: v["targets_met"] for k, v in choice["validation"].items()}
    return (table(["measure", "target", *(c for c, _ in columns)], rows)
            + f"\nTargets met on validation: {', '.join(f'{k} {v}' for k, v in met.items())}; chosen: "
              f"{choice['chosen']}. `{shipped['command']}`; `{cand['command']}`\n")


# --- the speeds ---------------------------------------------------------------------------

def load(rel: str) -> Any:
    path = RESULTS / rel
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def link(rel: str, text: str) -> str:
    return f"[{text}](results/{rel})"


def two_core() -> dict:
    bench, turns, serve = load(TWO_CORE_BENCH), load(TWO_CORE_COMMAND), load(TWO_CORE_SERVICE)
    medians = turns[-1]
    return {"bench": bench, "command_s": medians["medians"]["new"]["vqa_score_s"],
            "command_ratio": medians["medians"]["new"]["ratio"], "floor_s": medians["floor_s"], "serve": serve}


def two_core_table() -> str:
    t = two_core()
    pipe = t["bench"]["pipeline"]
    rows = [[f"`vqa score` of a 1080p 30 fps clip (720 frames, keyframe every 2 s), default plan, "
             f"median of {len(load(TWO_CORE_COMMAND)) - 1} rounds", f"{t['command_s']:.2f} s",
             f"{t['command_ratio']:.3f}x the time of decoding every frame ({t['floor_s']:.2f} s)",
             link(TWO_CORE_COMMAND, "rounds")]]
    for key, best in t["bench"]["batch"]["best"].items():
        by_batch = {r["batch_size"]: r["views_per_s"] for r in t["bench"]["batch"]["rows"]
                    if f"{r['backend']}/{r['precision']}" == key}
        rows.append([f"inference, {key.replace('/', ' ')}, views/s", f"{by_batch.get(4, best['views_per_s']):.0f} at batch 4",
                     f"best {best['views_per_s']:.0f} at batch {best['batch_size']}", link(TWO_CORE_BENCH, "batch study")])
    rows.append([f"every frame of the 1080p clip, {pipe['detail']['engine']['workers']} workers, OpenVINO fp32",
                 f"{pipe['fps']['engine']:.1f} frames/s",
                 f"decoding alone {pipe['fps']['decode_floor']:.1f}, inference alone {pipe['fps']['infer_floor']:.1f}",
                 link(TWO_CORE_BENCH, "pipeline study")])
    s = t["serve"]
    rows.append(["the service against `vqa score` on one folder, videos/min (median of the per-round ratios)",
                 f"{s['throughput']['median_ratio_per_round']:.2f}x",
                 f"{len(s['throughput']['cli_videos_per_min'])} rounds, taking turns going first",
                 link(TWO_CORE_SERVICE, "service study")])
    rows.append(["the service's added latency for one upload, median", f"{s['latency']['added_ms_median']:.1f} ms",
                 f"{s['latency']['requests']} requests", link(TWO_CORE_SERVICE, "service study")])
    return table(["what", "measured", "beside it", "file"], rows)


def h200_rows() -> list[dict]:
    """One row per backend and plan, one value per machine start: (best, median) videos/min."""
    rows: dict[tuple[str, str], dict] = {}
    for start, folder in enumerate(H200_STARTS):
        for plan, name in (("default", "speed_default.json"), ("all", "speed_all.json")):
            data = load(f"{folder}/{name}")["folder"]
            for backend, study in data["by_backend"].items():
                s = study["sampling"][plan]
                row = rows.setdefault((backend, plan), {"backend": backend, "plan": plan, "starts": {}})
                row["starts"][start] = (s["videos_per_min"], s["videos_per_min_median"],
                                        f"{s['workers']} + {s['inference_threads']}", f"{folder}/{name}")
    return list(rows.values())


def start_name(folder: str) -> str:
    """A machine start as its env.txt names it: the commit and the day."""
    lines = (RESULTS / folder / "env.txt").read_text().splitlines()
    commit = next(line.split()[1][:7] for line in lines if line.startswith("commit "))
    day = " ".join(lines[0].split()[1:3])
    return f"{commit}, {day}"


def h200_table() -> str:
    head = ["backend", "frames", *[f"start {i + 1} ({start_name(f)})" for i, f in enumerate(H200_STARTS)],
            "median of the starts"]
    out = []
    for row in h200_rows():
        cells = []
        for i in range(len(H200_STARTS)):
            if i in row["starts"]:
                best, median, split, rel = row["starts"][i]
                cells.append(link(rel, f"{best:.0f} ({median:.0f})") + f" at {split}")
            else:
                cells.append("")
        middle = statistics.median(v[0] for v in row["starts"].values())
        plan = "default plan" if row["plan"] == "default" else "every frame"
        out.append([f"`{row['backend']}`", plan, *cells, f"**{middle:.0f}**"])
    return table(head, out)


# Issue 34's rows and records: one H200 start, several calls, each call's files named by its
# number (N_native_default.json, N_ceiling_plan.json).
GPU_ENGINE = "h200-2026-12-06-engine-4"
GPU_ENGINE_ROWS = {  # the folder study's label -> what a user names
    "cuda:fp16+pyav": "GPU path with CPU decode workers: `cuda:fp16`",
    "cuda:fp16+nvdec:4": "GPU engine, 4 processes: `cuda:fp16 --decoder nvdec` (auto on 16 cores)",
    "cuda:fp16+nvdec:6": "GPU engine, 6 processes: `--gpu-processes 6`",
}
GPU_ENGINE_BASE = "cuda:fp16+pyav"
GPU_ENGINE_PROFILE = "h100-2026-12-06-engine-3"  # where the engine's time goes: an H100 start


def _processes(row: Any) -> set[int]:
    """The GPU engine's process counts a result row ran with (its runs' ``gpu_processes``)."""
    if isinstance(row, dict):
        here = {row["gpu_processes"]} if "gpu_processes" in row and "seconds" in row else set()
        return here.union(*(_processes(v) for v in row.values()))
    if isinstance(row, list):
        return set().union(*(_processes(v) for v in row))
    return set()


def gpu_engine_table() -> str:
    """Issue 34's `vqa bench` rows, in turns within each call of one start, with the NVDEC
    ceiling each call measured first; ratios are each call's own, their median shown."""
    head = ["path", "plan", "videos/min, best (median), call by call", "over the GPU path with CPU decoding",
            "of NVDEC's ceiling"]
    rows = []
    for plan, study, ceiling in (("default", "native_default", "ceiling_plan"), ("all", "native_all", "ceiling_all")):
        calls = sorted(int(p.name.split("_", 1)[0]) for p in (RESULTS / GPU_ENGINE).glob(f"*_{study}.json"))
        runs = {n: load(f"{GPU_ENGINE}/{n}_{study}.json")["folder"]["by_backend"] for n in calls}
        ceil = {n: load(f"{GPU_ENGINE}/{n}_{ceiling}.json")["results"][0]["videos_per_min"] for n in calls}
        name = "default plan, 120 clips" if plan == "default" else "every frame, 30 clips"
        for label, who in GPU_ENGINE_ROWS.items():
            ran = _processes([runs[n][label] for n in calls])
            if "processes" in who and ran != {int(label.rsplit(":", 1)[1])}:  # the name says what ran
                raise SystemExit(f"{label}: ran in {ran} processes, not as '{who}'")
            got = {n: runs[n][label]["sampling"][plan] for n in calls}
            cells = ", ".join(link(f"{GPU_ENGINE}/{n}_{study}.json", f"{got[n]['videos_per_min']:.0f} "
                                   f"({got[n]['videos_per_min_median']:.0f})") for n in calls)
            over = statistics.median(got[n]["videos_per_min"] / runs[n][GPU_ENGINE_BASE]["sampling"][plan]
                                     ["videos_per_min"] for n in calls)
            share = statistics.median(got[n]["videos_per_min"] / ceil[n] for n in calls)
            rows.append([who, name, cells, f"{over:.2f}x", f"{share:.0%}"])
        rows.append(["NVDEC alone: 32 decoders in one process, pictures left on the GPU (PyNvVideoCodec"
                     + (", its own sampler on the same 32 frames)" if plan == "default" else ")"), name,
                     ", ".join(link(f"{GPU_ENGINE}/{n}_{ceiling}.json", f"{ceil[n]:.0f}") for n in calls), "", "100%"])
    return table(head, rows)


def gpu_engine_steady() -> str:
    """The GPU engine once running (gpu_engine_profile.py: the folder scored after a warm-up), by
    processes and sessions, against the library's own sampler on the same start."""
    ceiling = load(f"{GPU_ENGINE_PROFILE}/ceiling_plan.json")["results"][0]["videos_per_min"]
    rows = []
    for name in ("gpu_engine_profile.json", "gpu_engine_grid.json"):
        for r in load(f"{GPU_ENGINE_PROFILE}/{name}")["whole"]:
            if r["frames"] != "default":
                continue
            each = r["sessions"] // r["processes"]
            rows.append((r["processes"], each, [f"{r['processes']} x {each}", link(f"{GPU_ENGINE_PROFILE}/{name}",
                         f"{r['videos_per_min']:.0f}"), f"{r['videos_per_min'] / ceiling:.0%}",
                         f"{r['gpu_busy_pct']:.0f}%", f"{r['nvdec_busy_pct']:.0f}%"]))
    rows.sort(key=lambda row: (row[0], row[1]))
    return table(["processes x sessions each", "videos/min, default plan", "of NVDEC's own sampler",
                  "GPU busy", "NVDEC busy"], [row[2] for row in rows])


def gpu_engine_records() -> str:
    """The GPU engine's records against the CPU path's, from the result files."""
    data = load(f"{GPU_ENGINE}/records_native.json")
    ref = data["backends"][data["reference"]]  # the CPU path's backend, or its stand-in (gpu_records.py)
    rows = []
    for label in ("cuda:fp32+nvdec", "cuda:fp16+nvdec"):
        b = data["backends"][label]
        same = sum(a == c for a, c in zip(b["categories"], ref["categories"]))
        fell = len(b.get("warnings_by_clip", {}))
        rows.append([f"`{label}`", len(data["clips"]), fell, link(f"{GPU_ENGINE}/records_native.json",
                     f"{b['vs_reference']['mean']:.2f} / {b['vs_reference']['max']:.1f}"),
                     f"{same} of {len(ref['categories'])}"])
    against = f"points from `{data['reference']}` with FFmpeg's decoding" + \
        (" (the CPU path)" if data["reference"].startswith("openvino") else "") + ", mean / max"
    return table(["GPU engine", "clips", "of them decoded on the CPU (fallback)", against, "same category"], rows)


def headline() -> str:
    """The README's few rows, each linked to the page that says how it was measured."""
    t = two_core()
    h200 = {(r["backend"], r["plan"]): statistics.median(v[0] for v in r["starts"].values()) for r in h200_rows()}
    every = json.loads(JUDGEMENT.read_text())
    res = every[judgement_decisions(every)[0]]
    test = res.get("test", res["validation"])
    where = "test" if "test" in res else "validation"
    card = "[model card](docs/model/card.md#version-420-against-410)"
    rows = [[f"{name} ({where}, {test['clips']} clips)", read(test), card] for name, _, read in JUDGEMENT_ROWS
            if not name.startswith(("category is", "noise ladders", "the same", "every photo"))]
    int8 = _int8(JUDGEMENT.parent)[where]
    rows.append([f"INT8 against FP32, points of score, mean / max ({where}, {int8['clips']} clips)",
                 f"{int8['mean_abs_score_diff']:.2f} / {int8['max_abs_score_diff']:.1f}", card])
    rows.append(["`vqa score` of a 10 s 1080p clip on 2 cores",
                 f"{t['command_s']:.2f} s ({t['command_ratio']:.2f}x decoding every frame)",
                 "[Performance](docs/performance/index.md)"])
    for backend in ("openvino:fp32", "cuda:fp16"):
        if (backend, "default") in h200:
            rows.append([f"a folder of 720p clips on 16 cores, `{backend}`",
                         f"{h200[(backend, 'default')]:.0f} videos/min",
                         "[Performance](docs/performance/index.md)"])
    return table(["measure", "today", "how it was measured"], rows)


# --- writing and checking -----------------------------------------------------------------

def generated() -> dict[str, str]:
    out = {
        "error-codes.md": markdown_table(ErrorCode) + "\n",
        "run-codes.md": markdown_table(ErrorCode, per_video=False) + "\n",
        "warning-codes.md": markdown_table(WarningCode) + "\n",
        "record-fields.md": record_fields(),
        "csv-columns.md": csv_columns(),
        "score-options.md": score_options(),
        "model-numbers.md": model_table(),
        "modules.md": modules(),
        "manifest.md": manifest_blocks(),
        "judgement.md": judgement_table(),
        "candidate-v7.md": candidate_v7_table(),
        "performance-2core.md": two_core_table(),
        "performance-h200.md": h200_table(),
        "performance-gpu-engine.md": gpu_engine_table() + "\n" + gpu_engine_records(),
        "performance-gpu-engine-steady.md": gpu_engine_steady(),
    }
    for name in sorted(cli.commands):
        out[f"cli-{name}.md"] = command_flags(name)
    return {name: f"<!-- made by scripts/docs/tables.py from vqa {vqa.__version__}: do not edit -->\n{text}"
            for name, text in out.items()}


def readme_with(table_text: str, readme: str) -> str:
    head, rest = readme.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_START}\n{table_text}{README_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = ap.parse_args(argv)
    files = {OUT / name: text for name, text in generated().items()}
    readme = ROOT / "README.md"
    files[readme] = readme_with(headline(), readme.read_text())
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    known = {p.name for p in files}
    extra = [p for p in OUT.glob("*.md") if p.name not in known]
    if args.check:
        for p in [*stale, *extra]:
            print(f"{p.relative_to(ROOT)} differs from the code: run python scripts/docs/tables.py", file=sys.stderr)
        return 1 if stale or extra else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for p in stale:
        p.write_text(files[p])
    for p in extra:
        p.unlink()
    print(f"{len(stale)} of {len(files)} files written, {len(extra)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
