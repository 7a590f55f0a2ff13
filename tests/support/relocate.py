"""Move test files merged in at tests/ itself into the layout of tests/README.md, and rewrite the
helper imports of the flat layout (``from clips import ...``) to ``tests.support``.

    python -m tests.support.relocate          # from the repository root, after a merge
    git diff --stat -M; python -m pytest --collect-only -q | tail -1

A file is moved with ``git mv`` (so later merges follow it): a helper (not ``test_*``) to
tests/support/, a test by its old name (the table below) or its prefix (``test_serve_x.py`` to
tests/serve/test_x.py); one it cannot place is named and left where it is. A moved file's paths
built from ``__file__`` gain the level it went down. tests/project/test_suite_layout.py fails
while anything is left at tests/ itself."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# Helpers of the flat layout whose module name changed in tests/support/.
RENAMED_HELPERS = {"engine_helpers": "engine", "serve_helpers": "server", "hostile": "malformed_media",
                   "hostile_streams": "lying_streams"}

# Test files of the flat layout whose new name is not their prefix's rule.
RENAMED_TESTS = {
    "test_cli_e2e.py": "cli/test_end_to_end.py", "test_cli_terminal.py": "cli/test_terminal.py",
    "test_config.py": "cli/test_options.py", "test_what_a_user_reads.py": "cli/test_summary_and_progress.py",
    "test_decode.py": "decode/test_backends.py", "test_media_kinds.py": "decode/test_media_kinds.py",
    "test_media_timelines.py": "decode/test_timelines.py", "test_nvdec.py": "decode/test_nvdec.py",
    "test_nvdec_device.py": "decode/test_nvdec_device.py", "test_sample.py": "decode/test_sample_plan.py",
    "test_sampling_cost.py": "decode/test_sampling_cost.py", "test_engine.py": "engine/test_parallel.py",
    "test_batch.py": "engine/test_batch_ring.py", "test_isolation.py": "engine/test_isolation.py",
    "test_startup.py": "engine/test_startup.py", "test_environment.py": "engine/test_machine_resources.py",
    "test_ray.py": "engine/test_ray.py", "test_infer.py": "infer/test_backends.py",
    "test_cuda.py": "infer/test_cuda.py",
    "test_cuda_device.py": "infer/test_cuda_device.py", "test_finish.py": "infer/test_finish_views.py",
    "test_preprocess.py": "infer/test_preprocess.py", "test_hostile.py": "inputs/test_malformed_media.py",
    "test_fuzz.py": "inputs/test_fuzz.py", "test_same_answer.py": "inputs/test_paths_every_door.py",
    "test_cli_hostile.py": "inputs/test_malformed_folder_cli.py", "test_streaming.py": "inputs/test_lazy_inputs.py",
    "test_job.py": "jobs/test_folder_job.py", "test_resume.py": "jobs/test_kill_and_resume.py",
    "test_job_safety.py": "jobs/test_operator_mistakes.py", "test_pipeline.py": "library/test_scorer.py",
    "test_concurrency.py": "library/test_concurrency.py", "test_futures.py": "library/test_futures.py",
    "test_lifecycle.py": "library/test_lifecycle.py", "test_embedding.py": "library/test_host_programs.py",
    "test_aggregate.py": "model/test_aggregate.py", "test_manifest.py": "model/test_manifest.py",
    "test_model_card.py": "model/test_model_card.py", "test_calibrate.py": "model/test_calibrate.py",
    "test_golden.py": "model/test_golden.py", "test_train_pairs.py": "model/test_train_pairs.py",
    "test_training_data.py": "model/test_training_data.py", "test_output_paths.py": "outputs/test_destinations.py",
    "test_output_pressure.py": "outputs/test_write_failures.py", "test_report.py": "report/test_writers.py",
    "test_report_html.py": "report/test_html.py", "test_report_browser.py": "report/test_browser.py",
    "test_report_layout.py": "report/test_page_layout.py", "test_report_hostile.py": "report/test_malformed_results.py",
    "test_serve.py": "serve/test_server.py", "test_serve_hostile.py": "serve/test_malformed_uploads.py",
    "test_codes.py": "project/test_codes.py", "test_layout.py": "project/test_package_layout.py",
    "test_doctests.py": "project/test_doctests.py", "test_install_and_usage.py": "project/test_first_use.py",
    "test_bench.py": "bench/test_bench.py",
    # files other branches added while the layout moved
    "test_docs.py": "project/test_docs.py", "test_types.py": "project/test_types.py",
}
PREFIXES = {"test_serve_": "serve", "test_report_": "report", "test_cli_": "cli", "test_decode_": "decode",
            "test_engine_": "engine", "test_job_": "jobs", "test_ray_": "engine", "test_model_": "model"}


def destination(name: str) -> str | None:
    if not name.startswith("test_"):
        return f"support/{RENAMED_HELPERS.get(name[:-3], name[:-3])}.py"
    if name in RENAMED_TESTS:
        return RENAMED_TESTS[name]
    for prefix, folder in PREFIXES.items():
        if name.startswith(prefix):
            return f"{folder}/test_{name[len(prefix):]}"
    return None


def one_level_deeper(text: str) -> str:
    text = text.replace("Path(__file__).resolve().parents[1]", "Path(__file__).resolve().parents[2]")
    text = text.replace("Path(__file__).resolve().parent.parent", "Path(__file__).resolve().parents[2]")
    return text.replace("os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
                        "os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))")


def support_imports(text: str, helpers: set[str]) -> str:
    for old in sorted(helpers | set(RENAMED_HELPERS)):
        new = RENAMED_HELPERS.get(old, old)
        text = re.sub(rf"^(\s*)from (?:tests\.)?{old} import", rf"\1from tests.support.{new} import", text, flags=re.M)
        alias = "" if new == old else f" as {old}"
        text = re.sub(rf"^(\s*)import {old}$", rf"\1from tests.support import {new}{alias}", text, flags=re.M)
    return text


def main() -> int:
    left = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name in ("__init__.py", "conftest.py"):
            continue
        to = destination(path.name)
        if to is None or (TESTS / to).exists():
            left.append(path.name)
            continue
        subprocess.run(["git", "mv", str(path), str(TESTS / to)], check=True)
        (TESTS / to).write_text(one_level_deeper((TESTS / to).read_text()))
        print(f"tests/{path.name} -> tests/{to}")
    helpers = {p.stem for p in (TESTS / "support").glob("*.py") if p.stem != "__init__"}
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text()
        if (new := support_imports(text, helpers)) != text:
            path.write_text(new)
            print(f"imports rewritten: {path.relative_to(TESTS.parent)}")
    if left:
        print(f"left at tests/ (no rule, or the destination exists): {left}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
