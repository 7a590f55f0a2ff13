"""vqa.config.ScoreOptions: the one home of each scoring option, from the CLI flag to the record."""
from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner
from tests.support.fakes import touch

from vqa import cli
from vqa.config import AUTO_BATCH_SIZE, MAX_BATCH_SIZE, ScoreOptions, cli_fields
from vqa.errors import UsageError
from vqa.infer import BACKENDS, MODES


def test_every_option_has_one_check_and_a_default_that_passes_it():
    for f in dataclasses.fields(ScoreOptions):
        assert f.metadata["check"](f.default) is None, f.name
    ScoreOptions().validate()


@pytest.mark.parametrize("bad, message", [
    (dict(batch_size=0), "batch_size"), (dict(batch_size=MAX_BATCH_SIZE + 1), "batch_size"),
    (dict(batch_size=True), "batch_size"), (dict(frames=0), "frames"), (dict(frames="most"), "frames"),
    (dict(workers=-1), "workers"), (dict(threads=0), "threads"), (dict(mode="fast"), "mode"),
    (dict(backend="tpu"), "backend"), (dict(precision="fp16"), "precision"), (dict(decoder="x"), "decoder"),
    (dict(timeout_s=-1), "timeout_s"), (dict(timeout_s=float("nan")), "timeout_s"),
    (dict(worker_memory_mb=100), "worker_memory_mb"), (dict(timeline="yes"), "timeline"),
    (dict(backend="pytorch", precision="int8"), "runs precision fp32"),
])
def test_each_bad_value_is_refused_by_validate_with_its_name(bad, message):
    with pytest.raises(UsageError, match=message):
        ScoreOptions(**bad).validate()


def test_an_unknown_option_is_a_type_error():
    with pytest.raises(TypeError):
        ScoreOptions(batchsize=4)


def test_resolve_decides_every_auto():
    for mode in MODES:
        r = ScoreOptions(mode=mode).resolve(cores=8)
        assert r.batch_size == AUTO_BATCH_SIZE[mode]
        assert (r.workers, r.threads) == (4, 4) and r.worker_memory_mb == 4096
    r = ScoreOptions(workers=0, worker_memory_mb=0, timeout_s=0).resolve(cores=3)
    assert (r.workers, r.threads, r.decode_threads, r.worker_memory_mb, r.timeout_s) == (0, 3, 3, None, None)
    assert ScoreOptions(batch_size=7, timeout_s=2.5).resolve(cores=2).batch_size == 7


def test_bf16_gives_inference_a_third_of_the_cores_and_warns_from_there():
    # bfloat16 runs about twice fp32's views a thread: 11 + 5 on 16 cores (README, Performance)
    r = ScoreOptions(precision="bf16").resolve(cores=16)
    assert (r.workers, r.threads) == (11, 5) and r.split_warning is None
    assert (ScoreOptions(precision="fp32").resolve(cores=16).workers, ScoreOptions().resolve(cores=2).workers) == (8, 1)
    # fp32's auto (8 + 8) leaves bf16's decoding short of its 11 workers, but not starved
    assert ScoreOptions(precision="bf16", workers=8).resolve(cores=16).split_warning is None
    warned = ScoreOptions(precision="bf16", workers=4).resolve(cores=16).split_warning
    assert warned is not None and "auto would use --workers 11 --threads 5" in warned


def test_record_config_holds_only_what_changes_results():
    base = ScoreOptions().resolve(cores=2).record_config()
    assert base == {"sampling": "default", "backend": "openvino", "batch_size": 4, "decoder": "pyav",
                    "precision": "fp32", "mode": "throughput"}
    for speed_only in (dict(workers=3), dict(threads=1), dict(timeout_s=9.0), dict(worker_memory_mb=2048)):
        assert ScoreOptions(**speed_only).resolve(cores=2).record_config() == base
    assert ScoreOptions(timeline=True).resolve(cores=2).record_config() == {**base, "timeline": True}


def test_one_table_says_which_config_keys_change_a_result():
    from vqa import jobstore
    from vqa.types import CONFIG_KEYS, RESULT_OPTIONS

    assert jobstore.RESULT_OPTIONS is RESULT_OPTIONS
    full = ScoreOptions(timeline=True)
    assert list(full.record_config()) == list(CONFIG_KEYS)  # every key a record carries is in the table
    changes = {"sampling": dict(frames=8), "backend": dict(backend="pytorch"), "batch_size": dict(batch_size=2),
               "decoder": dict(decoder="opencv"), "precision": dict(precision="int8"), "mode": dict(mode="latency"),
               "timeline": dict(timeline=False)}
    assert set(changes) == set(CONFIG_KEYS)
    model = {"name": "m", "version": "1", "sha256": "0" * 64}
    for key, change in changes.items():
        other = full.replace(**change).record_config()
        assert other.get(key) != full.record_config().get(key)
        # The job store's key moves with a key that changes a result, and with no other.
        assert (jobstore.config_key(model, other) != jobstore.config_key(model, full.record_config())) \
            is CONFIG_KEYS[key], key


def test_the_record_config_is_the_same_on_every_machine():
    options = ScoreOptions(workers=12, threads=2)
    assert options.record_config() == options.resolve(cores=4).record_config() \
        == options.resolve(cores=64).record_config()


def test_the_cli_flags_are_the_fields_and_take_their_choices_from_the_tables():
    names = {f.name for f in cli_fields()}
    assert names == {f.name for f in dataclasses.fields(ScoreOptions)}
    assert dataclasses.fields(ScoreOptions)[1].metadata["choices"] == (*BACKENDS, "auto")
    help_text = CliRunner().invoke(cli.cli, ["score", "--help"]).output
    for f in cli_fields():
        assert f.metadata["flag"] in help_text


@pytest.mark.parametrize("args, want", [
    ([], ScoreOptions()),
    (["--frames", "ALL", "--batch-size", "16", "--mode", "latency", "--workers", "0", "--threads", "3"],
     ScoreOptions(frames="all", batch_size=16, mode="latency", workers=0, threads=3)),
    (["--timeout", "0", "--worker-memory", "0", "--timeline"],
     ScoreOptions(timeout_s=None, worker_memory_mb=None, timeline=True)),
])
def test_flags_become_one_score_options(fake, tmp_path, args, want):
    clip = touch(tmp_path / "a.mp4")
    assert CliRunner().invoke(cli.cli, ["score", str(clip), *args]).exit_code == 0
    (scorer,) = fake.instances
    assert scorer.options == want


@pytest.mark.parametrize("args", [["--batch-size", "0"], ["--batch-size", "many"], ["--frames", "0"],
                                  ["--workers", "-1"], ["--timeout", "soon"], ["--worker-memory", "100"],
                                  ["--backend", "pytorch", "--precision", "int8"]])
def test_bad_flags_are_usage_errors_before_anything_is_made(fake, tmp_path, args):
    clip = touch(tmp_path / "a.mp4")
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(cli.cli, ["score", str(clip), "-o", str(out), *args])
    assert result.exit_code == 2, result.output
    assert fake.instances == [] and not out.exists() and not (tmp_path / "r.jsonl.vqa.db").exists()
