"""vqa.bench and `vqa bench`: the studies return their documented keys with positive numbers.

Timing windows are tiny and nothing is asserted about speed: speed goals belong in the
benchmark's output, not in tests.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from tests.support.clips import textured_frames, write_clip

from vqa.bench import folder as bench_folder
from vqa.bench import studies as bench
from vqa.bench.report import format_report
from vqa.cli import cli
from vqa.errors import UsageError
from vqa.infer import available_backends
from vqa.model import load_model_spec

QUICK = {"batch_sizes": (1, 2), "seconds": 0.01}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "tiny.mp4"
    write_clip(path, textured_frames(24, 180, 320), fps=24, options={"crf": "20", "g": "12"})
    return path


@pytest.fixture(scope="module")
def spec():
    return load_model_spec()


def _positive(d: dict, keys) -> None:
    for k in keys:
        assert isinstance(d[k], (int, float)) and d[k] > 0, (k, d[k])


def test_batch_study_rows(tiny_clip, spec):
    out = bench.batch_study(spec, clip=tiny_clip, backends=[("openvino", "fp32"), ("openvino", "int8")], **QUICK)
    json.dumps(out)
    assert {"study", "rows", "best", "skipped", "views", "seconds_per_point", "load_avg", "note"} <= out.keys()
    assert [(r["backend"], r["precision"], r["batch_size"]) for r in out["rows"]] == [
        ("openvino", "fp32", 1), ("openvino", "fp32", 2), ("openvino", "int8", 1), ("openvino", "int8", 2)]
    for row in out["rows"]:
        _positive(row, ["calls", "latency_ms_median", "latency_ms_p90", "views_per_s"])
    assert out["best"]["openvino/fp32"]["batch_size"] in (1, 2)
    assert out["views"]["distinct"] == 24


def test_missing_backend_or_precision_is_skipped(tiny_clip, spec, monkeypatch):
    def unavailable(*_a, **_k):
        from vqa.errors import BackendUnavailable
        raise BackendUnavailable("backend 'pytorch' needs the 'torch' package")

    monkeypatch.setattr(bench, "open_inferencer", unavailable)
    out = bench.batch_study(spec, views=np.zeros((2, 224, 224, 3), np.uint8), backends=[("pytorch", "fp32")], **QUICK)
    assert out["rows"] == [] and out["skipped"][0]["backend"] == "pytorch"


def test_parse_backends():
    assert bench.parse_backends(["openvino", "pytorch:fp32"]) == [
        ("openvino", "fp32"), ("openvino", "int8"), ("pytorch", "fp32")]
    assert bench.parse_backends(["openvino:bf16"]) == [("openvino", "bf16")]  # by name only
    with pytest.raises(UsageError, match="choose from"):
        bench.parse_backends(["pytorch:int8"])
    with pytest.raises(UsageError):
        bench.batch_study(batch_sizes=(1,))  # no views and no clip


@pytest.mark.slow
def test_pipeline_study(tiny_clip, spec):
    naive = "pytorch" in available_backends()
    out = bench.pipeline_study(tiny_clip, spec, frames="all", infer_batch_size=4, naive=naive)
    json.dumps(out)
    assert {"study", "clip", "seconds", "fps", "ratios", "detail", "default_sampling", "load_avg", "note"} <= out.keys()
    measured = ["engine", "decode_floor", "infer_floor"] + (["naive"] if naive else [])
    _positive(out["seconds"], measured)
    _positive(out["fps"], measured)
    _positive(out["ratios"], ["engine_over_floor_sum"] + (["engine_speedup_over_naive"] if naive else []))
    assert out["detail"]["decode_floor"]["frames"] == 24 == out["detail"]["engine"]["frames_sampled"]
    if naive:
        assert out["detail"]["naive"]["frames"] == 24
    _positive(out["default_sampling"], ["engine_s", "frames_sampled", "decode_floor_all_s",
                                        "decode_floor_all_over_engine"])


@pytest.mark.slow
def test_cli_bench_json(tiny_clip):
    result = CliRunner().invoke(cli, ["bench", str(tiny_clip), "--json", "--seconds", "0.01",
                                      "--batch-size", "1", "--batch-size", "2", "--backend", "openvino:fp32",
                                      "--study", "batch", "--study", "pipeline"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert "vqa bench: batch study" in result.stderr  # progress, on stderr
    assert out["batch"]["study"] == "batch" and out["pipeline"]["study"] == "pipeline"
    assert out["pipeline"]["seconds"]["naive"] is None  # pytorch not asked for: no baseline, no torch
    assert out["pipeline"]["detail"]["infer_floor"]["batch_size"] == out["batch"]["best"]["openvino/fp32"]["batch_size"]
    assert "Inference by batch size" in format_report(out)


def test_cli_bench_bad_backend(tiny_clip):
    result = CliRunner().invoke(cli, ["bench", str(tiny_clip), "--backend", "tensorrt"])
    assert result.exit_code == 2 and "E_USAGE" in result.output


# --- engine studies (fix 12: progress, the settings `vqa score` uses, a quick mode) -----------

def test_engine_row_uses_the_settings_of_vqa_score(tiny_clip, spec):
    """The engine row ran at batch 16 while `vqa score` runs at 4."""
    from vqa import Scorer

    out = bench.pipeline_study(tiny_clip, spec, frames="default", infer_batch_size=4, naive=False)
    with Scorer(workers=0) as scorer:
        assert out["detail"]["engine"]["batch_size"] == scorer.resolved.batch_size
        assert out["detail"]["engine"]["mode"] == scorer.config["mode"]


@pytest.mark.slow
def test_startup_study_times_each_phase(tiny_clip):
    from vqa.bench.engine import startup_study

    out = startup_study(tiny_clip, runs=1)
    _positive(out["phases_alone_s"], ["imports_s", "hashing_s", "compile_s", "spawn_s"])
    _positive(out, ["overhead_s", "ready_s", "first_record_s", "wall_s"])
    assert "Start-up of `vqa score CLIP`" in format_report({"startup": out})


@pytest.mark.slow
def test_concurrency_and_streaming_studies(tiny_clip):
    from vqa.bench.engine import concurrency_study, streaming_study

    c = concurrency_study(tiny_clip, threads=2, per_thread=2)
    assert c["records_identical"] and c["videos"] == 4
    _positive(c, ["score_many_s", "threads_s", "threads_over_score_many"])
    st = streaming_study(2000)
    assert st["first_record"]["paths_read"] < 100 and len(st["rss_mb"]) == 10
    text = format_report({"concurrency": c, "streaming": st})
    assert "Threads sharing one Scorer" in text and "Streaming 2,000 paths" in text


@pytest.mark.slow
def test_cli_bench_quick(tiny_clip):
    result = CliRunner().invoke(cli, ["bench", str(tiny_clip), "--quick", "--study", "batch", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {r["batch_size"] for r in out["batch"]["rows"]} == set(bench.QUICK["batch_sizes"])
    assert {(r["backend"], r["precision"]) for r in out["batch"]["rows"]} <= set(bench.QUICK["backends"])


# --- the folder study (vqa.bench.folder) -----------------------------------------------------

@pytest.mark.slow
def test_folder_study_makes_a_folder_and_compares_the_plans(tmp_path):

    result = bench_folder.folder_study(tmp_path, videos=2, size=(160, 96), length_s=2, keyframe_s=1, workers=[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_000.mp4", "bench_001.mp4"]
    assert result["videos"] == 2 and result["first_video"]["keyframes"] == 2
    every, default = result["sampling"]["all"], result["sampling"]["default"]
    assert every["frames_sampled"] == every["frames_decoded"] == 2 * 60  # every frame, decoded once
    assert default["frames_sampled"] == 2 * 32 and 1 <= default["decoded_per_sampled"] <= 2
    assert default["videos_per_min"] > 0 and result["default_over_all"] > 0
    assert [r["workers"] for r in result["workers"]] == [1] and result["workers"][0]["efficiency"] == 1.0
    assert "videos/min" in bench_folder.format_folder(result)


def test_folder_study_refuses_a_folder_of_other_files(tmp_path):

    (tmp_path / "notes.txt").write_text("not a video")
    with pytest.raises(UsageError, match="no videos"):
        bench_folder.folder_study(tmp_path)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):

    folder = tmp_path_factory.mktemp("folder")
    bench_folder.make_folder(folder, videos=2, size=(160, 96), length_s=1, keyframe_s=0.5)
    return folder


@pytest.mark.slow
def test_folder_study_runs_each_setting_on_each_backend_and_gives_their_ratio(tiny_folder):

    result = bench_folder.folder_study(tiny_folder, workers=[1], sampling=("default",),
                                       backends=[("openvino", "fp32"), ("openvino", "int8")])
    assert result["backends"] == ["openvino:fp32", "openvino:int8"] == list(result["by_backend"])
    for label, rows in result["by_backend"].items():
        name, precision = label.split(":")
        assert list(rows["sampling"]) == ["default"] and [r["workers"] for r in rows["workers"]] == [1]
        for r in [*rows["sampling"].values(), *rows["workers"]]:
            assert (r["backend"], r["precision"]) == (name, precision) and r["videos_per_min"] > 0
            assert r["warm_s"] == 0.0  # no CUDA graph buckets to capture on a CPU backend
            assert r["warm_videos"] == r["workers"]  # each worker met a video before the timed run
    assert result["sampling"] == result["by_backend"]["openvino:fp32"]["sampling"]  # the first backend's rows on top
    ratios = result["over_first"]["openvino:int8 over openvino:fp32"]
    assert set(ratios) == {"frames=default", "workers=1"} and ratios["frames=default"]["best"] > 0
    text = bench_folder.format_folder(result)
    assert "openvino:int8 over openvino:fp32: frames=default" in text and "openvino:int8" in text.splitlines()[3]


def test_folder_rows_keep_each_round_and_pair_the_efficiency_by_round():
    """Best and median hide which rounds ran together; each row keeps its rounds in order, and
    the sweep's efficiency is also given against the lone worker of the same round."""

    def run(workers, seconds):
        return {"workers": workers, "seconds": seconds}

    runs = {("workers", 1, "x"): [run(1, 60.0), run(1, 30.0), run(1, 40.0)],
            ("workers", 4, "x"): [run(4, 20.0), run(4, 10.0), run(4, 5.0)]}
    rows = bench_folder._backend_result(runs, "x", videos=10)["workers"]
    one, four = rows
    assert one["videos_per_min_by_round"] == [10.0, 20.0, 15.0] and one["videos_per_min"] == 20.0
    assert four["videos_per_min_by_round"] == [30.0, 60.0, 120.0] and four["videos_per_min_median"] == 60.0
    assert four["efficiency"] == 1.5  # 120 / (4 x 20): best against best, from different rounds
    assert four["efficiency_by_round"] == [0.75, 0.75, 2.0]


@pytest.mark.parametrize("text, want", [("pyav", {"decoder": "pyav", "nvdec_workers": 0}),
                                        ("nvdec", {"decoder": "nvdec", "nvdec_workers": 0}),
                                        ("pyav+nvdec:3", {"decoder": "pyav", "nvdec_workers": 3}),
                                        ("nvdec:4", {"decoder": "nvdec", "nvdec_workers": 0, "gpu_processes": 4})])
def test_folder_study_decoder_names(text, want):

    assert bench_folder.decoder_spec(text) == want


@pytest.mark.parametrize("text", ["pyav+nvdec", "pyav+nvdec:0", "opencv+nvdec:2", "pyav+nvdec:x", "vlc", "nvdec:0",
                                  "pyav:2"])
def test_folder_study_refuses_other_decoder_names(text):
    from vqa.errors import UsageError

    with pytest.raises(UsageError, match="unknown decoder"):
        bench_folder.decoder_spec(text)


def test_folder_study_refuses_a_backend_named_twice(tiny_folder):

    with pytest.raises(UsageError, match="named twice"):
        bench_folder.folder_study(tiny_folder, backends=[("openvino", "fp32"), ("openvino", "fp32")])


def test_warming_captures_the_buckets_up_to_the_batch_size_and_nothing_on_a_cpu_backend():
    from types import SimpleNamespace


    class Buckets:
        buckets = (1, 8, 32, 128)

        def __init__(self):
            self.sizes = []

        def infer(self, views):
            self.sizes.append(len(views))

    gpu = Buckets()
    scorer = SimpleNamespace(inferencer=gpu, spec=SimpleNamespace(view_size=4), resolved=SimpleNamespace(batch_size=32))
    assert bench_folder.warm(scorer) >= 0 and gpu.sizes == [1, 8, 32]
    assert bench_folder.warm(SimpleNamespace(inferencer=object())) == 0.0


@pytest.mark.slow
def test_cli_folder_study_with_one_plan_no_sweep_and_two_backends(tiny_folder):
    result = CliRunner().invoke(cli, ["bench", str(tiny_folder), "--study", "folder", "--frames", "all", "--no-sweep",
                                      "--backend", "openvino:fp32", "--backend", "openvino:int8", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)["folder"]
    assert out["backends"] == ["openvino:fp32", "openvino:int8"]
    assert all(list(b["sampling"]) == ["all"] and b["workers"] == [] for b in out["by_backend"].values())
    assert list(out["over_first"]["openvino:int8 over openvino:fp32"]) == ["frames=all"]


@pytest.mark.slow
def test_cli_folder_study_with_a_batch_size_runs_every_row_at_it(tiny_folder):
    result = CliRunner().invoke(cli, ["bench", str(tiny_folder), "--study", "folder", "--frames", "default",
                                      "--workers", "1", "--batch-size", "3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)["folder"]
    rows = [*out["sampling"].values(), *out["workers"]]
    assert len(rows) == 2 and {r["batch_size"] for r in rows} == {3}


@pytest.mark.parametrize("args, code", [(["--workers", "1", "--no-sweep"], "E_USAGE"),
                                         (["--backend", "nope"], "E_USAGE"),
                                         (["--batch-size", "4", "--batch-size", "8"], "E_USAGE"),
                                         (["--decoder", "pyav+nvdec:0"], "E_USAGE")])
def test_cli_folder_study_refuses_bad_combinations(tiny_folder, args, code):
    result = CliRunner().invoke(cli, ["bench", str(tiny_folder), "--study", "folder", *args])
    assert result.exit_code == 2 and f"error: {code}:" in result.stderr


@pytest.mark.skipif("cuda" in available_backends(), reason="a CUDA device is present")
def test_cli_folder_study_on_cuda_without_a_gpu_is_e_backend(tiny_folder):
    result = CliRunner().invoke(cli, ["bench", str(tiny_folder), "--study", "folder", "--backend", "cuda:fp32",
                                      "--no-sweep", "--frames", "default"])
    assert result.exit_code == 2, result.output
    assert "error: E_BACKEND:" in result.stderr and "cuda" in result.stderr and "Traceback" not in result.output
