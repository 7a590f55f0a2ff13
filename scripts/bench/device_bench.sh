#!/usr/bin/env bash
# Issue 20 on the lent GPU machine (one H200, 16 cores, Python 3.12, torch with CUDA; no PyAV,
# no OpenVINO): the GPU tests, gpu_check.py, and the folder study, CPU path against GPU path.
#
#   bash scripts/bench/device_bench.sh pack [MAIN]     # here: wheels and code into MAIN/.whl, MAIN/.device_bench
#   bash .device_bench/device_bench.sh PHASE...  # there, from the checkout's root; phases in order:
#     stage   unpack every carried .whl/*/*.tar.xz into /tmp/site (kept while the machine is warm),
#             put the carried code (.device_bench/code.tar.xz) in place of vqa/ tests/ scripts/
#     check   pytest tests/infer/test_cuda_device.py (-rA log and JUnit XML), scripts/bench/gpu_check.py --variants
#     folder  120 clips of 1280x720, 10 s, a keyframe every 2 s, made once; the sample videos' records
#             through the pool engine per backend (scripts/bench/gpu_records.py); `vqa bench --study folder`:
#             default plan openvino:fp32 / cuda:fp32 / cuda:fp16 in turns (120 clips, 2 rounds);
#             every frame openvino:fp32 / cuda:fp32 in turns (30 clips, 2 rounds); the CPU worker
#             sweep 1, 2, 4, 8, 15 (openvino, 32 clips, 2 rounds); a cuda sweep 4, 8, 12 (60 clips, 1 round)
#     speed   the same folders, fewer rows: default plan openvino fp32 / int8 / cuda fp16 (120 clips),
#             every frame openvino fp32 / cuda fp16 (30), workers 1, 8, 10 for both CPU precisions
#             (32) and 1, 8, 15, 16 for cuda (60), 2 rounds each: speed_*.json
#     bf16    openvino fp32 against bf16 (AMX): records, views/s at 4, 5 and 8 threads, the default
#             plan (120 clips) at 8, 11 and 12 workers in turns: records_bf16.json, infer_*.json,
#             bf16_default.json
#     busy    scripts/bench/worker_busy.py: worker CPU per video, busy shares and clock at 1 and 8 workers,
#             cuda fp16 / openvino fp32 / bf16 in turns (64 clips): worker_busy.json
#     finish  the GPU tests and records (cuda fp32 / fp16 against openvino fp32) with the views finished
#             on the GPU, on clips of 720p, 576p, 768p and 600p: records_finish.json
#     rows    issue 20's ring rows to the GPU: scripts/bench/rows_profile.py (rows_profile.json), then views/s
#             through submit() and submit_rows() (the ring pinned, and staged) at batch 32 and 128, cuda
#             fp16, this code and AB_OLD's in turns (infer_rows.json)
#     native  issue 34's GPU engine: its GPU tests (pytest_native.log), records against the CPU path on the
#             sample videos, 10 folder clips and the real clips in .device_bench/real (records_native.json),
#             and the NVDEC ceiling on this start with shared/gpu's nvdec_ceiling.py carried in .device_bench
#             (ceiling_all.json: every frame, ceiling_plan.json: the library's sampler on the default plan)
#     nativebench  its folder rows, in turns: default plan (120 clips) and every frame (30), openvino fp32
#             and cuda fp16, each with pyav and nvdec (the GPU engine for cuda), and the GPU engine in 4 and 8
#             processes (nvdec:4, nvdec:8; NATIVE_DECODERS): native_default.json, native_all.json; the NVDEC
#             ceiling of the same start first (ceiling_all.json, ceiling_plan.json; once a call);
#             NATIVE_ALL_ROUNDS: the every-frame rows' rounds (0: none); NATIVE_TESTS=0 leaves out native's
#             tests. nvdec:P names the engine's processes and leaves out openvino with NVDEC's CPU-copy
#             decoder (a minute a round). Without OpenVINO staged, both phases leave out the CPU path and
#             take cuda:fp32 with FFmpeg's decoding as the records' reference.
#     profile where the GPU engine's time goes (scripts/bench/gpu_engine_profile.py on the default plan's
#             120 clips): one session under cProfile, PyAV in threads, sessions x processes with the GPU's
#             and NVDEC's utilisation, the session threads sampled: gpu_engine_profile.json
#             (PROFILE_WHOLE="SxP,...": only those sessions x processes rows)
#     streams OpenVINO streams and thread pinning (scripts/bench/ov_streams.py): views/s, then the default
#             plan (120 clips) per variant in turns: streams_grid.json, streams_folder.json
#     ab      this code against commit AB_OLD (packed with `AB_OLD=COMMIT ... pack`) in turns, each
#             in its own `vqa bench` process: cuda fp16 every frame (30 clips) and default plan (120);
#             AB_BACKEND and AB_DECODER (e.g. nvdec: the GPU engine) choose the row; `AB_MID=COMMIT ... pack`
#             adds a third code, run between the two in each turn
# Each call ends within DEADLINE_S (default 440 s): a step that would not fit is skipped, said in
# run.log. Files under $OUT (the device tool brings back 8 a call; past that all but run.log go into
# results-<time>.tar.gz): run.log, env.txt and each step's result:
#   check: pytest_cuda_device.log, pytest_cuda_device.xml, gpu_check.json
#   folder: records.json (scripts/bench/gpu_records.py), folder_default.json, folder_all.json,
#           folder_sweep_cpu.json, folder_sweep_cuda.json
#
# The wheels do not fit one call beside the checkout (64 MiB a call, the checkout is 36 MiB):
# PyAV 18.1.0 as it is (25 MB of xz) travels in one call, OpenVINO 2026.4.1 without its GPU and NPU
# plugins, their kernel cache, its headers and its non-IR frontends (19 MB of xz) in the next.
#
# Issue 34's GPU engine in one call (one start, no machine kept warm between calls): the cuda
# backends load the .pt alone, so with the OpenVINO IRs moved out of the checkout for the call,
# PyAV, NVDEC's wheel and the real clips fit beside it (about 53 MiB); records then take
# cuda:fp32 with FFmpeg's decoding as the CPU path's stand-in and the CPU row is left out:
#   here:  mkdir -p /tmp/ir && mv models/vqa-effl0*.xml models/vqa-effl0*.bin /tmp/ir/   (back after)
#   carry: .whl/av .whl/nv .device_bench/real .device_bench/nvdec_ceiling.py
#   there: NATIVE_DECODERS="pyav nvdec:4 nvdec:6" bash scripts/bench/device_bench.sh stage native nativebench
#
# Smaller runs (a dry run without a GPU runs every step but the cuda ones):
#   N_CLIPS=4 N_CLIPS_ALL=2 N_CLIPS_SWEEP=2 N_CLIPS_CUDA_SWEEP=3 CLIP_SPEC=320x180,2,1 ROUNDS=1 SWEEP_CPU="1" \
#   SWEEP_CUDA="1" FORCE_GPU=1 GPU_BACKEND=pytorch bash .device_bench/device_bench.sh stage folder
# pack: PACK_CODE_ONLY=1 repacks the code alone; PACK_PYVER=3.11 fetches wheels for a local dry
# run here (SITE=/tmp/site_dry311 keeps them apart).
set -uo pipefail

PY=${PY:-python3}
OUT=${OUT:-}
SITE=${SITE:-/tmp/site}
DEADLINE_S=${DEADLINE_S:-440}
# Clip counts: a folder's last videos leave workers idle, so the rows that compare backends use
# multiples of 15 (cuda's auto workers on 16 cores) and where it fits of 8 (openvino's): 120 for
# the default plan; 30 for every frame (2 waves of 15, 3.75 of 8: the CPU row may lose up to 6%
# to its last wave, where 32 clips would cost the GPU row up to 29%); 32 for the CPU sweep (as
# the README's, at half its 64); 60 for the cuda sweep (4, 8, 12 workers).
N_CLIPS=${N_CLIPS:-120}
N_CLIPS_ALL=${N_CLIPS_ALL:-30}
N_CLIPS_SWEEP=${N_CLIPS_SWEEP:-32}
N_CLIPS_CUDA_SWEEP=${N_CLIPS_CUDA_SWEEP:-60}
CLIP_SPEC=${CLIP_SPEC:-1280x720,10,2}
ROUNDS=${ROUNDS:-}
SWEEP_CPU=${SWEEP_CPU:-1 2 4 8 15}
SWEEP_CUDA=${SWEEP_CUDA:-4 8 12}
T0=$(date +%s)

left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }

# step NAME NEED_S MAX_S COMMAND...: run COMMAND under a timeout of at most MAX_S, or skip it
# when fewer than NEED_S seconds are left.
step() {
  local name=$1 need=$2 max=$3 l t s rc
  shift 3
  l=$(left)
  if (( l < need )); then
    echo "== SKIPPED $name: $l s left of $DEADLINE_S, it needs about $need"
    return 0
  fi
  t=$(( l < max ? l : max ))
  echo "== $name (at most $t s, $l s left) $(date -u +%T)"
  s=$(date +%s)
  timeout -k 5 "$t" "$@"
  rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - s )) s"
  return 0
}

pack() {
  local main=${1:-/work/main} here pyver=${PACK_PYVER:-3.12} tmp
  here=$(cd "$(dirname "$0")/../.." && pwd)
  tmp=${PACK_TMP:-/tmp/device_bench_pack}
  mkdir -p "$tmp/dl" "$main/.whl/av" "$main/.whl/ov" "$main/.device_bench"
  if [ -z "${PACK_CODE_ONLY:-}" ]; then
    pack_wheels "$main" "$tmp" "$pyver" || return 1
  fi
  (cd "$here" && git archive HEAD vqa tests scripts pyproject.toml setup.cfg) | xz -6 > "$main/.device_bench/code.tar.xz"
  (cd "$here" && git rev-parse HEAD) > "$main/.device_bench/COMMIT"
  rm -f "$main/.device_bench/old_code.tar.xz" "$main/.device_bench/mid_code.tar.xz"
  if [ -n "${AB_OLD:-}" ]; then  # the code the ab phase measures against
    (cd "$here" && git archive "$AB_OLD" vqa scripts) | xz -6 > "$main/.device_bench/old_code.tar.xz"
  fi
  if [ -n "${AB_MID:-}" ]; then  # a third, measured between the two
    (cd "$here" && git archive "$AB_MID" vqa scripts) | xz -6 > "$main/.device_bench/mid_code.tar.xz"
  fi
  cp "$here/scripts/bench/device_bench.sh" "$main/.device_bench/device_bench.sh"
  local tree
  tree=$(cd "$main" && git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
  echo "tree $(( tree / 1048576 )) MiB; carried per call (limit 64 MiB with the tree):"
  du -b "$main/.whl/av/av.tar.xz" "$main/.whl/ov/ov.tar.xz" "$main/.device_bench"
}

pack_wheels() {
  local main=$1 tmp=$2 pyver=$3
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp/dl" av==18.1.0 openvino==2026.4.1 || return 1
  rm -rf "$tmp/av" "$tmp/ov" && mkdir -p "$tmp/av" "$tmp/ov"
  unzip -q "$tmp"/dl/av-18.1.0-*.whl -d "$tmp/av" || return 1
  unzip -q "$tmp/dl/openvino-2026.4.1-"*"cp${pyver/./}"*.whl -d "$tmp/ov" || return 1
  # PyAV: every library of av.libs is needed by libavcodec/libavformat; only the stubs go.
  find "$tmp/av" \( -name '*.pyi' -o -name '*.pxd' \) -delete
  # OpenVINO: the CPU plugin, the IR frontend and the Python API stay.
  local ov=$tmp/ov/openvino
  rm -rf "$ov/include" "$ov/cmake" "$ov/tools" "$ov"/libs/libopenvino_intel_{gpu,npu}_plugin.so "$ov/libs/cache.json"
  rm -f "$ov"/libs/libopenvino_{onnx,paddle,pytorch,tensorflow,tensorflow_lite,jax,gguf}_frontend.so.*
  rm -rf "$ov"/frontend/{onnx,paddle,pytorch,tensorflow,jax}
  tar -C "$tmp/av" -cf - . | xz -T2 -9 > "$main/.whl/av/av.tar.xz" || return 1
  tar -C "$tmp/ov" -cf - . | xz -T2 -9 > "$main/.whl/ov/ov.tar.xz" || return 1
}

stage() {
  mkdir -p "$SITE"
  local f mark
  for f in .whl/*/*.tar.xz; do
    [ -e "$f" ] || continue
    mark="$SITE/.staged-$(basename "$f")-$(stat -c %s "$f")"
    if [ -e "$mark" ]; then
      echo "$f is in $SITE already"
      continue
    fi
    echo "unpacking $f into $SITE"
    if tar -xJf "$f" -C "$SITE"; then touch "$mark"; else echo "FAILED to unpack $f"; fi
  done
  if [ -f .device_bench/code.tar.xz ]; then
    echo "the code of commit $(cat .device_bench/COMMIT 2>/dev/null) in place of vqa/ tests/ scripts/"
    rm -rf vqa tests scripts && tar -xJf .device_bench/code.tar.xz || echo "FAILED to unpack the code"
  fi
}

env_report() {
  {
    date -u
    echo "commit $(cat .device_bench/COMMIT 2>/dev/null)"
    nvidia-smi -L 2>&1
    echo "nproc $(nproc); load $(cat /proc/loadavg)"
    "$PY" - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "numpy", "cv2", "av", "openvino", "click", "pytest"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"), getattr(m, "__file__", ""))
    except Exception as e:
        print(name, "MISSING", type(e).__name__, e)
from vqa.threads import usable_cores, plan_threads
from vqa.infer import cuda_available, available_backends
print("usable_cores", usable_cores(), "cuda", cuda_available(), "backends", available_backends())
print("auto cpu", plan_threads(), "auto cuda", plan_threads(accelerator=True))
EOF
  } > "${1:-/dev/stdout}" 2>&1
}

# FORCE_GPU=1 GPU_BACKEND=pytorch: the GPU steps' plumbing, tried without a GPU (a dry run).
GPU_BACKEND=${GPU_BACKEND:-cuda}
GPU_HALF=fp16; [ "$GPU_BACKEND" = cuda ] || GPU_HALF=fp32  # the dry run's pytorch has no fp16
gpu_here() {
  [ -n "${FORCE_GPU:-}" ] || "$PY" -c "from vqa.infer import cuda_available; raise SystemExit(0 if cuda_available() else 1)"
}

check() {
  if ! gpu_here; then
    echo "== SKIPPED check: no CUDA device here"
    return 0
  fi
  step pytest_cuda_device 60 150 "$PY" -m pytest -q -rA -p no:cacheprovider tests/infer/test_cuda_device.py \
    --junitxml="$OUT/pytest_cuda_device.xml" 2>&1 | tee "$OUT/pytest_cuda_device.log"
  # Its JSON goes to the file alone (stdout would repeat it in run.log).
  step gpu_check 120 280 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_check.py --variants --seconds 1 \
    --variant-seconds 1 --out "$OUT/gpu_check.json"
}

bench() {  # bench NAME NEED MAX FOLDER ARGS...: one folder study, JSON to $OUT/NAME.json
  local name=$1 need=$2 max=$3 folder=$4
  shift 4
  step "$name" "$need" "$max" sh -c 'exec "$@" > "$0"' "$OUT/$name.json" \
    "$PY" -m vqa.cli bench "$folder" --study folder --json "$@"
}

# clips N...: /tmp/vqa_f holds N_CLIPS clips of CLIP_SPEC (made once while the machine is warm),
# and /tmp/vqa_fN the first N of them, as links, for each N given.
clips() {
  local size length key n
  IFS=, read -r size length key <<< "$CLIP_SPEC"
  if [ "$(ls /tmp/vqa_f/ 2>/dev/null | wc -l)" != "$N_CLIPS" ]; then
    rm -rf /tmp/vqa_f /tmp/vqa_f[0-9]* && mkdir -p /tmp/vqa_f
    step make_clips 30 120 "$PY" -c "
from pathlib import Path
from vqa.bench.folder import make_folder
make_folder(Path('/tmp/vqa_f'), videos=$N_CLIPS, size=tuple(int(x) for x in '$size'.split('x')),
            length_s=$length, keyframe_s=$key)"
  fi
  for n in "$@"; do
    if [ ! -d "/tmp/vqa_f$n" ]; then
      mkdir -p "/tmp/vqa_f$n" && ls /tmp/vqa_f | sort | head -n "$n" | while read -r f; do ln "/tmp/vqa_f/$f" "/tmp/vqa_f$n/$f"; done
    fi
  done
}

folder() {
  if ! "$PY" -c "import av, openvino" 2>/dev/null; then
    echo "== SKIPPED folder: PyAV or OpenVINO is not importable (/tmp/site is lost when the machine goes"
    echo "   back: stage both again, av in one call and ov in the next)"
    return 0
  fi
  local cuda="" cuda16=""
  if gpu_here; then cuda="--backend $GPU_BACKEND:fp32"; [ "$GPU_BACKEND" = cuda ] && cuda16="--backend cuda:fp16"; fi
  clips "$N_CLIPS_ALL" "$N_CLIPS_SWEEP" "$N_CLIPS_CUDA_SWEEP"
  echo "$(ls /tmp/vqa_f | wc -l) clips in /tmp/vqa_f, $(du -sh /tmp/vqa_f | cut -f1)"
  # The sample videos and one folder clip through the pool engine on each backend (records.json);
  # a GPU backend that fails there is left out of the folder study, so the CPU rows still come back.
  # shellcheck disable=SC2086
  step records 20 90 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_records.py --out "$OUT/records.json" \
    sample_videos/*.mp4 /tmp/vqa_f/bench_000.mp4 --backend openvino:fp32 $cuda $cuda16
  if [ -n "$cuda" ] && ! "$PY" -c "
import json, sys
rows = json.load(open('$OUT/records.json'))['backends']
sys.exit(any('error' in v for k, v in rows.items() if k.startswith('$GPU_BACKEND:')))"; then
    echo "== the $GPU_BACKEND backend failed through the pool engine (records.json): the folder study runs without it"
    cuda="" cuda16=""
  fi
  # shellcheck disable=SC2086  # the backend flags are meant to split
  bench folder_default 60 130 /tmp/vqa_f --frames default --no-sweep --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 $cuda $cuda16
  # shellcheck disable=SC2086
  bench folder_all 50 110 "/tmp/vqa_f$N_CLIPS_ALL" --frames all --no-sweep --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 $cuda
  local w sweep=()
  for w in $SWEEP_CPU; do sweep+=(--workers "$w"); done
  bench folder_sweep_cpu 110 170 "/tmp/vqa_f$N_CLIPS_SWEEP" --frames default --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 "${sweep[@]}"
  if [ -n "$cuda" ]; then
    sweep=()
    for w in $SWEEP_CUDA; do sweep+=(--workers "$w"); done
    # shellcheck disable=SC2086
    bench folder_sweep_cuda 30 80 "/tmp/vqa_f$N_CLIPS_CUDA_SWEEP" --frames default --rounds "${ROUNDS:-1}" $cuda \
      "${sweep[@]}"
  fi
}

nvdec() {  # the nvdec reader on real NVDEC: its pictures against FFmpeg's, and its speed
  if ! "$PY" -c "import av, PyNvVideoCodec" 2>/dev/null; then
    echo "== SKIPPED nvdec: PyAV or PyNvVideoCodec is not importable (stage .whl/av and .whl/nv)"
    return 0
  fi
  step pytest_nvdec_device 40 150 "$PY" -m pytest -q -rA -x -p no:cacheprovider tests/decode/test_nvdec_device.py \
    tests/decode/test_nvdec.py 2>&1 | tail -40 | tee "$OUT/pytest_nvdec_device.log"
  [ -f /tmp/nv720.mp4 ] || "$PY" scripts/bench/make_bench_clip.py /tmp/nv720.mp4 --size 1280x720 --frames 300 --fps 30 \
    --gop 60 > /dev/null 2>&1 || "$PY" -c "
from pathlib import Path
from vqa.bench.folder import make_folder
p = make_folder(Path('/tmp/nv720d'), videos=1, size=(1280, 720), length_s=10, keyframe_s=2)[0]
import shutil; shutil.copy(p, '/tmp/nv720.mp4')"
  step nvdec_check 40 200 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/nvdec_check.py /tmp/nv720.mp4 \
    --out "$OUT/nvdec_check.json" --procs ${NV_PROCS:-1 4 8 15}
}

nvfolder() {  # the folder study with each decoder, CPU and GPU inference (NV_* sizes the rows)
  local cuda="--backend cuda:${NV_PRECISION:-fp16}"
  gpu_here || cuda=""
  local n=$N_CLIPS_ALL
  clips "$n"
  # shellcheck disable=SC2086
  step records_nvdec 20 90 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_records.py --out "$OUT/records_nvdec.json" \
    sample_videos/*.mp4 /tmp/vqa_f/bench_000.mp4 --backend openvino:fp32 $cuda --decoder nvdec
  # shellcheck disable=SC2086
  bench nvfolder_all 50 200 "/tmp/vqa_f$n" --frames all --no-sweep --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 $cuda --decoder pyav --decoder nvdec
  # shellcheck disable=SC2086
  bench nvfolder_default 60 200 /tmp/vqa_f --frames default --no-sweep --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 --backend openvino:int8 $cuda --decoder pyav --decoder nvdec
}

# The CPU path's backend where OpenVINO is staged; without it (one call carries PyAV, NVDEC's
# wheel and the real clips, not OpenVINO too) the records' reference is cuda:fp32 with FFmpeg's
# decoding, which gave the CPU path's scores exactly on 243 test clips (docs/model/card.md).
cpu_ref() { "$PY" -c "import openvino" 2>/dev/null && echo openvino:fp32 || echo cuda:fp32; }

native() {  # issue 34: the GPU engine (--decoder nvdec --backend cuda) against the CPU and GPU paths
  "$PY" -c "import av, PyNvVideoCodec" 2>/dev/null || {
    echo "== SKIPPED native: stage .whl/av and .whl/nv first (and .whl/ov for the CPU path)"; return 0; }
  gpu_here || { echo "== SKIPPED native: no CUDA device here"; return 0; }
  clips "$N_CLIPS_ALL"
  [ "${NATIVE_TESTS:-1}" = 0 ] || step pytest_native 60 240 "$PY" -m pytest -q -rA -p no:cacheprovider tests/engine/test_gpu_engine_device.py \
    tests/engine/test_gpu_engine.py tests/decode/test_nvdec_device.py 2>&1 | tail -40 | tee "$OUT/pytest_native.log"
  # Records against the CPU path (cpu_ref, pyav): the sample videos, folder clips, real footage
  # carried in .device_bench/real (NATIVE_REAL), each backend with FFmpeg's decoding and with the GPU engine.
  local d decoders=() ref
  ref=$(cpu_ref)
  for d in ${NATIVE_RECORD_DECODERS:-pyav nvdec nvdec:4}; do decoders+=(--decoder "$d"); done
  # shellcheck disable=SC2086
  step records_native 30 300 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_records.py \
    --out "$OUT/records_native.json" sample_videos/*.mp4 /tmp/vqa_f/bench_00[0-9].mp4 ${NATIVE_REAL:-.device_bench/real/*.mp4} \
    --backend "$ref" $([ "$ref" = cuda:fp32 ] || echo --backend cuda:fp32) --backend cuda:fp16 "${decoders[@]}"
  # The card's NVDEC ceiling on this start (every frame, 32 decoder threads in one process), and the
  # library's own sampler on the default plan's frames: NVDEC.md's tool, carried in .device_bench.
  if [ -f .device_bench/nvdec_ceiling.py ]; then
    step ceiling_all 30 60 "$PY" .device_bench/nvdec_ceiling.py /tmp/vqa_f/bench_000.mp4 "$OUT/ceiling_all.json" \
      simple,32,all,native,96
    step ceiling_plan 30 60 "$PY" .device_bench/nvdec_ceiling.py /tmp/vqa_f/bench_000.mp4 "$OUT/ceiling_plan.json" \
      simple,32,plan,native,1280
  fi
}

nativebench() {  # issue 34's folder rows: the CPU path, the GPU path and the GPU engine in turns
  "$PY" -c "import av, PyNvVideoCodec" 2>/dev/null || {
    echo "== SKIPPED nativebench: stage .whl/av and .whl/nv first (and .whl/ov for the CPU path's row)"; return 0; }
  local cpu=""
  [ "$(cpu_ref)" = openvino:fp32 ] && cpu="--backend openvino:fp32"
  gpu_here || { echo "== SKIPPED nativebench: no CUDA device here"; return 0; }
  clips "$N_CLIPS_ALL"
  # The NVDEC ceiling of this start, beside the rows (once a call: native may have measured it)
  if [ -f .device_bench/nvdec_ceiling.py ] && [ ! -f "$OUT/ceiling_plan.json" ]; then
    step ceiling_all 30 60 "$PY" .device_bench/nvdec_ceiling.py /tmp/vqa_f/bench_000.mp4 "$OUT/ceiling_all.json" \
      simple,32,all,native,96
    step ceiling_plan 30 60 "$PY" .device_bench/nvdec_ceiling.py /tmp/vqa_f/bench_000.mp4 "$OUT/ceiling_plan.json" \
      simple,32,plan,native,1280
  fi
  local d decoders=()
  for d in ${NATIVE_DECODERS:-pyav nvdec nvdec:4 nvdec:8}; do decoders+=(--decoder "$d"); done
  # nvdec:P rows run with the cuda backend only (the folder study leaves out the openvino ones)
  # shellcheck disable=SC2086
  bench native_default 90 300 /tmp/vqa_f --frames default --no-sweep --rounds "${ROUNDS:-2}" \
    $cpu --backend cuda:fp16 "${decoders[@]}"
  local all_rounds=${NATIVE_ALL_ROUNDS:-${ROUNDS:-2}}
  [ "$all_rounds" = 0 ] && return 0
  # shellcheck disable=SC2086
  bench native_all 60 240 "/tmp/vqa_f$N_CLIPS_ALL" --frames all --no-sweep --rounds "$all_rounds" \
    $cpu --backend cuda:fp16 "${decoders[@]}"
}

profile() {  # issue 34: where the GPU engine's time goes
  "$PY" -c "import av, PyNvVideoCodec" 2>/dev/null || { echo "== SKIPPED profile: stage .whl/av and .whl/nv first"; return 0; }
  gpu_here || { echo "== SKIPPED profile: no CUDA device here"; return 0; }
  clips
  step engine_profile 60 300 "$PY" scripts/bench/gpu_engine_profile.py /tmp/vqa_f --out "$OUT/gpu_engine_profile.json" \
    ${PROFILE_WHOLE:+--whole "$PROFILE_WHOLE"}
  if [ -f .device_bench/nvdec_ceiling.py ]; then  # the NVDEC ceiling of this start, beside it
    step ceiling_all 30 60 "$PY" .device_bench/nvdec_ceiling.py /tmp/vqa_f/bench_000.mp4 "$OUT/ceiling_all.json" \
      simple,32,all,native,96
    step ceiling_plan 30 60 "$PY" .device_bench/nvdec_ceiling.py /tmp/vqa_f/bench_000.mp4 "$OUT/ceiling_plan.json" \
      simple,32,plan,native,1280
  fi
}

speed() {  # issues 18 and 20 after a worker-side change: CPU and GPU paths, int8, 15 vs 16 cuda workers
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED speed: stage .whl/av and .whl/ov first"; return 0; }
  lscpu > "$OUT/lscpu.txt" 2>&1
  local cuda="" w sweep=()
  gpu_here && cuda="--backend cuda:${SPEED_PRECISION:-fp16}"
  clips "$N_CLIPS_ALL" "$N_CLIPS_SWEEP" "$N_CLIPS_CUDA_SWEEP"
  # shellcheck disable=SC2086
  bench speed_default 60 130 /tmp/vqa_f --frames default --no-sweep --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 --backend openvino:int8 $cuda
  # shellcheck disable=SC2086
  bench speed_all 50 110 "/tmp/vqa_f$N_CLIPS_ALL" --frames all --no-sweep --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 $cuda
  for w in ${SPEED_SWEEP_CPU:-1 8 10}; do sweep+=(--workers "$w"); done
  bench speed_sweep_cpu 80 "${SPEED_SWEEP_MAX_S:-150}" "/tmp/vqa_f$N_CLIPS_SWEEP" --frames default --rounds "${ROUNDS:-2}" \
    --backend openvino:fp32 --backend openvino:int8 "${sweep[@]}"
  if [ -n "$cuda" ] && [ "${SPEED_SWEEP_CUDA:-}" != none ]; then
    sweep=()
    for w in ${SPEED_SWEEP_CUDA:-1 8 15 16}; do sweep+=(--workers "$w"); done
    # shellcheck disable=SC2086
    bench speed_sweep_cuda 40 110 "/tmp/vqa_f$N_CLIPS_CUDA_SWEEP" --frames default --rounds "${ROUNDS:-2}" $cuda \
      "${sweep[@]}"
  fi
}

hybrid() {  # issue 20: NVDEC workers beside the CPU ones (--nvdec-workers; HYBRID_NV sizes the rows)
  "$PY" -c "import av, openvino, PyNvVideoCodec" 2>/dev/null || {
    echo "== SKIPPED hybrid: stage .whl/av, then .whl/ov and .whl/nv"; return 0; }
  gpu_here || { echo "== SKIPPED hybrid: no CUDA device here"; return 0; }
  lscpu > "$OUT/lscpu.txt" 2>&1
  local k all=() def=() n=${N_CLIPS_HYBRID_ALL:-60}
  clips "$n"
  # One CPU worker beside four NVDEC ones, so NVDEC decodes most of the clips: records against
  # openvino fp32 with pyav alone (gpu_records.py's reference).
  step records_hybrid 20 120 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_records.py --out "$OUT/records_hybrid.json" \
    sample_videos/*.mp4 /tmp/vqa_f/bench_000.mp4 /tmp/vqa_f/bench_001.mp4 --workers 1 --backend openvino:fp32 \
    --backend "$GPU_BACKEND:$GPU_HALF" --decoder pyav+nvdec:4
  for k in ${HYBRID_NV_ALL:-2 4 8}; do all+=(--decoder "pyav+nvdec:$k"); done
  for k in ${HYBRID_NV_DEFAULT:-2 4}; do def+=(--decoder "pyav+nvdec:$k"); done
  bench hybrid_all 60 "${HYBRID_ALL_MAX_S:-240}" "/tmp/vqa_f$n" --frames all --no-sweep --rounds "${ROUNDS:-3}" \
    --backend "$GPU_BACKEND:$GPU_HALF" --decoder pyav "${all[@]}"
  bench hybrid_default 60 "${HYBRID_DEFAULT_MAX_S:-240}" /tmp/vqa_f --frames default --no-sweep --rounds "${ROUNDS:-3}" \
    --backend openvino:fp32 --backend "$GPU_BACKEND:$GPU_HALF" --decoder pyav "${def[@]}"
}

scaling() {  # issue 18: the worker sweep where inference is not the limit (cuda), the CPU path's
  # sweep beside it, and OpenVINO's views/s at the threads the CPU rows leave inference
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED scaling: stage .whl/av and .whl/ov first"; return 0; }
  lscpu > "$OUT/lscpu.txt" 2>&1
  local w sweep=() n=${N_CLIPS_SCALING:-64}
  clips "$n"
  step infer_threads 30 90 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/infer_threads.py --backend openvino:fp32 \
    --threads 8 15 --out "$OUT/infer_threads.json"
  for w in ${SCALING_WORKERS:-1 2 4 8}; do sweep+=(--workers "$w"); done
  local cuda=""
  gpu_here && cuda="--backend $GPU_BACKEND:$GPU_HALF"
  # shellcheck disable=SC2086
  bench scaling_sweep 80 "${SCALING_MAX_S:-300}" "/tmp/vqa_f$n" --frames default --rounds "${ROUNDS:-3}" \
    $cuda --backend openvino:fp32 "${sweep[@]}"
}

batch() {  # issue 18: OpenVINO's batch on 16 cores (auto's 4 was chosen on 2): views/s by batch at
  # 8 and 15 threads, then the default plan (auto split and the 1 / 8 worker sweep, 64 clips) at
  # batch 4 and at the best batch of 8 threads, BATCH_ROUNDS rounds in turns, one JSON each
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED batch: stage .whl/av and .whl/ov first"; return 0; }
  local n=${N_CLIPS_SCALING:-64} r b best
  clips "$n"
  step infer_batches 30 120 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/infer_threads.py --backend openvino:fp32 \
    --threads 8 15 --batch-size 4 8 16 32 --seconds 2 --out "$OUT/infer_batches.json"
  best=$("$PY" -c "
import json
rows = [r for r in json.load(open('$OUT/infer_batches.json'))['rows'] if r['threads'] == 8]
b = max(rows, key=lambda r: r['submitted']['views_per_s'])['batch_size']
print(b if b != 4 else 16)" 2>/dev/null || echo 16)
  echo "== batch 4 against batch $best"
  for r in $(seq 1 "${BATCH_ROUNDS:-3}"); do
    for b in 4 "$best"; do
      bench "batch${b}_$r" 40 90 "/tmp/vqa_f$n" --frames default --rounds 1 --batch-size "$b" \
        --backend openvino:fp32 --workers 1 --workers 8
    done
  done
}

bf16() {  # issue 18: OpenVINO in bfloat16 (AMX on the H200's Xeon) against fp32: records, views/s
  # by threads, then the default plan on 120 clips at 8, 11 and 12 workers (inference takes the
  # other cores), both precisions in turns, BF16_ROUNDS rounds
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED bf16: stage .whl/av and .whl/ov first"; return 0; }
  lscpu > "$OUT/lscpu.txt" 2>&1
  clips "$N_CLIPS"
  step records_bf16 20 120 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_records.py --out "$OUT/records_bf16.json" \
    sample_videos/*.mp4 /tmp/vqa_f/bench_000.mp4 /tmp/vqa_f/bench_001.mp4 /tmp/vqa_f/bench_002.mp4 --workers 1 \
    --backend openvino:fp32 --backend openvino:bf16
  local p
  for p in fp32 bf16; do
    step "infer_$p" 20 60 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/infer_threads.py --backend "openvino:$p" \
      --threads 4 5 8 --batch-size 4 --seconds 2 --out "$OUT/infer_$p.json"
  done
  bench bf16_default 60 "${BF16_MAX_S:-300}" /tmp/vqa_f --frames default --rounds "${BF16_ROUNDS:-2}" \
    --backend openvino:fp32 --backend openvino:bf16 --workers 8 --workers 11 --workers 12
}

streams() {  # issue 18: OpenVINO's streams and pinning (scripts/bench/ov_streams.py): views/s by threads,
  # streams and pinning on random views, then the default plan on 120 clips, each variant
  # (streams:pinning:workers, STREAMS_VARIANTS) in its own `vqa bench` process, in turns, STREAMS_ROUNDS rounds
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED streams: stage .whl/av and .whl/ov first"; return 0; }
  lscpu > "$OUT/lscpu.txt" 2>&1
  clips "$N_CLIPS"
  step streams_grid 30 "${STREAMS_GRID_MAX_S:-150}" sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/ov_streams.py grid \
    --threads ${STREAMS_THREADS:-7 8 9} --streams auto threads half --pinning default off --seconds 3 \
    --out "$OUT/streams_grid.json"
  local r v s pin w dir=/tmp/streams_runs
  rm -rf "$dir" && mkdir -p "$dir"
  for r in $(seq "${STREAMS_ROUNDS:-3}"); do
    for v in ${STREAMS_VARIANTS:-auto:default:8 threads:default:8 auto:off:8 threads:off:8 threads:default:9 threads:default:7}; do
      IFS=: read -r s pin w <<< "$v"
      step "streams_${v//:/_}_$r" 20 60 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/ov_streams.py folder /tmp/vqa_f \
        --workers "$w" --streams "$s" --pinning "$pin" --out "$dir/${v//:/_}_$r.json"
    done
  done
  "$PY" - "$dir" "$OUT/streams_folder.json" <<'PYEOF'
import json, sys
from pathlib import Path
runs = {}
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    variant, round_ = f.stem.rsplit("_", 1)
    try:
        row = json.loads(f.read_text())
        runs.setdefault(variant, []).append({"round": int(round_), **{k: row[k] for k in (
            "videos_per_min", "workers", "inference_threads", "seconds", "load_avg")}})
    except (ValueError, KeyError) as e:
        runs.setdefault(variant, []).append({"round": int(round_), "error": repr(e)})
for variant, rows in runs.items():
    vals = sorted(r["videos_per_min"] for r in rows if "videos_per_min" in r)
    print(variant, "videos/min by round:", [r.get("videos_per_min") for r in sorted(rows, key=lambda r: r["round"])],
          "median:", vals[len(vals) // 2] if vals else None)
Path(sys.argv[2]).write_text(json.dumps(runs, indent=1) + "\n")
PYEOF
}

busy() {  # issue 18: why eight workers score less than eight times one (scripts/bench/worker_busy.py):
  # each worker's CPU per video and busy share, the parent's threads, the cores' clock, at 1 and
  # 8 workers, cuda fp16 (inference off the CPU) and openvino fp32 / bf16 in turns
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED busy: stage .whl/av and .whl/ov first"; return 0; }
  lscpu > "$OUT/lscpu.txt" 2>&1
  local n=${N_CLIPS_SCALING:-64} cuda=()
  clips "$n"
  gpu_here && cuda=(--backend "$GPU_BACKEND:$GPU_HALF")
  step worker_busy 60 "${BUSY_MAX_S:-420}" "$PY" scripts/bench/worker_busy.py "/tmp/vqa_f$n" "${cuda[@]}" \
    --backend openvino:fp32 --backend openvino:bf16 --workers 1 --workers 8 --rounds "${BUSY_ROUNDS:-2}" \
    --out "$OUT/worker_busy.json"
}

finish() {  # issue 20: views finished on the GPU from the workers' mosaics (vqa.infer.finish): the GPU
  # tests, then records through the pool engine, cuda fp32 / fp16 against openvino fp32, on the
  # sample videos and clips of 720p, 576p, 768p and 600p (regions of 43, 34, 46 and 36 px)
  "$PY" -c "import av, openvino" 2>/dev/null || { echo "== SKIPPED finish: stage .whl/av and .whl/ov first"; return 0; }
  gpu_here || { echo "== SKIPPED finish: no CUDA device here"; return 0; }
  step pytest_cuda_device 60 150 sh -c '"$@" 2>&1 | tee "$0"' "$OUT/pytest_cuda_device.log" "$PY" -m pytest -q -rA \
    -p no:cacheprovider tests/infer/test_cuda_device.py --junitxml="$OUT/pytest_cuda_device.xml"
  rm -rf /tmp/vqa_rc && mkdir -p /tmp/vqa_rc
  local size
  for size in 1280x720 1024x576 1366x768 800x600; do
    mkdir -p "/tmp/vqa_rc/$size"
    "$PY" -c "
from pathlib import Path
from vqa.bench.folder import make_folder
make_folder(Path('/tmp/vqa_rc/$size'), videos=1, size=tuple(int(x) for x in '$size'.split('x')), length_s=4, keyframe_s=2)"
  done
  step records_finish 30 240 sh -c 'exec "$@" > /dev/null' - "$PY" scripts/bench/gpu_records.py \
    --out "$OUT/records_finish.json" sample_videos/*.mp4 /tmp/vqa_rc/*/*.mp4 --workers 2 \
    --backend openvino:fp32 --backend cuda:fp32 --backend cuda:fp16
}

old_code() {  # AB_OLD's code (from `pack`) into /tmp/old_code, with this checkout's weights; 1 without it
  [ -f .device_bench/old_code.tar.xz ] || { echo "== SKIPPED $1: no .device_bench/old_code.tar.xz"; return 1; }
  rm -rf /tmp/old_code && mkdir -p /tmp/old_code && tar -xJf .device_bench/old_code.tar.xz -C /tmp/old_code
  ln -s "$PWD/models" /tmp/old_code/models
  rm -rf /tmp/mid_code
  if [ -f .device_bench/mid_code.tar.xz ]; then  # AB_MID's, where packed
    mkdir -p /tmp/mid_code && tar -xJf .device_bench/mid_code.tar.xz -C /tmp/mid_code
    ln -s "$PWD/models" /tmp/mid_code/models
  fi
}

rows() {  # issue 20: ring rows to the GPU, this code (the ring pinned, copies beside the replays,
  # the finish in float32) against AB_OLD's: where a batch's time goes (scripts/bench/rows_profile.py), then
  # views/s through submit() and submit_rows() (pinned and staged) at batch 32 and 128, fp16, in turns
  gpu_here || { echo "== SKIPPED rows: no CUDA device here"; return 0; }
  old_code rows || return 0
  "$PY" -c "
from vqa.batch import BatchRing
from vqa.infer import open_inferencer
from vqa.model import load_model_spec
gpu = open_inferencer(load_model_spec(), backend='cuda', precision='fp16')
with BatchRing(slots=4, batch_size=32, mosaic_side=336) as ring:
    unpin = gpu.pin(ring.array)
    print('the ring (shared memory) pinned:', gpu._is_pinned(ring.rows(1, 32)))
    unpin()
gpu.close()"
  step rows_profile 20 90 "$PY" scripts/bench/rows_profile.py --precision fp16 --batch-size 32 128 --out "$OUT/rows_profile.json"
  local r which dir script
  rm -f /tmp/infer_rows_*.json
  for r in $(seq 1 "${ROWS_ROUNDS:-2}"); do
    for which in old new; do
      dir=$PWD; [ "$which" = old ] && dir=/tmp/old_code
      script=scripts/bench/infer_threads.py; [ -f "$dir/$script" ] || script=${script/bench\//}  # a checkout before scripts/ was split
      step "infer_rows_${which}_$r" 30 90 sh -c 'cd "$1" && shift && exec "$@" > /dev/null' - "$dir" \
        env PYTHONPATH="$SITE:$dir" "$PY" "$script" --backend cuda:fp16 --threads 1 \
        --batch-size 32 128 --mosaic-region 43 --out "/tmp/infer_rows_${which}_$r.json"
    done
  done
  "$PY" - "$OUT" <<'PYEOF'
import json, pathlib, sys
runs = {p.stem[len("infer_rows_"):]: json.loads(p.read_text()) for p in sorted(pathlib.Path("/tmp").glob("infer_rows_*.json"))}
pathlib.Path(sys.argv[1], "infer_rows.json").write_text(json.dumps(runs, indent=1) + "\n")
for name, run in runs.items():
    for row in run["rows"]:
        print("views/s", name, row["batch_size"], {k: row[k]["views_per_s"] for k in row if k.startswith("submitted")})
PYEOF
}

ab() {  # this checkout against an older commit's code (.device_bench/old_code.tar.xz, from
  # `pack` with AB_OLD=COMMIT), in turns, on the GPU path: every frame (30 clips) and the default
  # plan (120), AB_ROUNDS rounds; JSON to $OUT/ab_{old,new}_{all,default}_ROUND.json
  "$PY" -c "import av" 2>/dev/null || { echo "== SKIPPED ab: stage .whl/av first"; return 0; }
  old_code ab || return 0
  local r which plan folder backend=${AB_BACKEND:-cuda:fp16}
  clips "$N_CLIPS_ALL"
  for r in $(seq 1 "${AB_ROUNDS:-2}"); do
    for plan in all default; do
      folder=/tmp/vqa_f; [ "$plan" = all ] && folder=/tmp/vqa_f$N_CLIPS_ALL
      for which in old mid new; do
        [ "$which" = mid ] && [ ! -d /tmp/mid_code ] && continue
        # Each from its own folder: `python -m` puts the working folder first on sys.path, so
        # run from here the old code's PYTHONPATH would import this checkout's vqa (it did once).
        local dir=$PWD
        [ "$which" != new ] && dir=/tmp/${which}_code
        step "ab_${which}_${plan}_$r" 20 90 sh -c 'cd "$1" && shift && exec "$@" > "$0"' \
          "$OUT/ab_${which}_${plan}_$r.json" "$dir" env PYTHONPATH="$SITE:$dir" "$PY" -m vqa.cli bench "$folder" \
          --study folder --json --frames "$plan" --no-sweep --rounds 1 --backend "$backend" \
          ${AB_DECODER:+--decoder "$AB_DECODER"}
      done
    done
  done
  "$PY" - "$OUT" <<'PYEOF'
import json, pathlib, statistics, sys
out, rows = pathlib.Path(sys.argv[1]), {}
for p in sorted(out.glob("ab_*_*_*.json")):
    _, which, plan, r = p.stem.split("_")
    try:
        f = json.loads(p.read_text())["folder"]
        row = next(iter(next(iter(f["by_backend"].values()))["sampling"].values()))
        rows.setdefault((plan, which), []).append((row["videos_per_min"], row["workers"]))
    except Exception as e:
        print(p.name, "unreadable", e)
for plan in ("all", "default"):
    old = rows.get((plan, "old"), [])
    for which in ("mid", "new"):
        new = rows.get((plan, which), [])
        if old and new:
            print(f"ab {plan}: old {old} {which} {new}; {which}/old by round "
                  f"{[round(n[0] / o[0], 3) for o, n in zip(old, new)]}, of medians "
                  f"{statistics.median(v for v, _ in new) / statistics.median(v for v, _ in old):.3f}")
PYEOF
}

summary() {  # the numbers to read first, from the JSON files of this call
  "$PY" - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    try:
        return json.loads((out / name).read_text())
    except Exception as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}
if (out / "gpu_check.json").exists():
    g = load("gpu_check.json")
    print("gpu_check targets:", json.dumps(g.get("targets")))
    vps = g.get("views_per_s") or {}
    print("gpu_check views/s:", vps["error"].strip().splitlines()[-1] if "error" in vps else json.dumps(vps))
    for name, row in (g.get("variants_summary") or {}).items():
        print(f"  variant {name}: {json.dumps(row)}")
for name in ("records.json", "records_hybrid.json"):
    if not (out / name).exists():
        continue
    r = load(name)
    for label, row in r.get("backends", {}).items():
        print(f"{name} {label}:", "ERROR" if "error" in row else
              f"vs {r.get('reference')} {row.get('vs_reference')} agrees={row.get('agrees')} scores={row['scores']}")
if (out / "nvdec_check.json").exists():
    print("nvdec_check:", json.dumps(load("nvdec_check.json"), indent=1)[:3000])
for name in ("infer_threads.json", "infer_batches.json"):
    for row in load(name).get("rows", []) if (out / name).exists() else []:
        print(f"infer_threads openvino fp32 {row['threads']} threads, batch {row['batch_size']}: "
              f"{row['submitted']['views_per_s']} views/s "
              f"submitted, {row['one_call_at_a_time']['views_per_s']} one call at a time")
for path in sorted([*out.glob("*folder_*.json"), *out.glob("speed_*.json"), *out.glob("hybrid_*.json"),
                    *out.glob("scaling_*.json"), *out.glob("batch*_*.json")]):
    f = load(path.name).get("folder")
    if not f:
        print(path.name, "has no result")
        continue
    print(f"{path.stem}: {f['videos']} videos, cores {f['cores']}, load {f['load_avg']}")
    for label, b in f["by_backend"].items():
        for key, row in b["sampling"].items():
            print(f"  {label} frames={key} {row['workers']}+{row['inference_threads']}: {row['videos_per_min']} "
                  f"videos/min best, {row['videos_per_min_median']} median, rounds "
                  f"{row.get('videos_per_min_by_round')}, warm {row['warm_s']} s")
        for row in b["workers"]:
            print(f"  {label} workers={row['workers']}+{row['inference_threads']}: {row['videos_per_min']} best, "
                  f"{row['videos_per_min_median']} median, efficiency {row['efficiency']}, by round "
                  f"{row.get('efficiency_by_round')}")
    for name, ratios in f.get("over_first", {}).items():
        print(f"  {name}: {json.dumps(ratios)}")
EOF
}

main() {
  if [ "${1:-}" = pack ]; then
    shift
    pack "$@"
    return
  fi
  if [ -z "$OUT" ]; then
    echo "OUT is not set: the device phases write under \$OUT" >&2
    return 2
  fi
  export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1
  local phase
  for phase in "$@"; do
    case $phase in
      stage|check|folder|nvdec|nvfolder|native|nativebench|profile|speed|hybrid|scaling|batch|bf16|busy|finish|rows|ab|streams) ;;
      *) echo "unknown phase $phase (stage, check, folder, nvdec, nvfolder, native, nativebench, profile, speed, hybrid, scaling, batch, bf16, busy, finish, rows, ab, streams; pack runs here)" >&2
         return 2 ;;
    esac
  done
  for phase in "$@"; do
    echo "=== phase $phase at $(( $(date +%s) - T0 )) s"
    case $phase in
      stage) stage; env_report "$OUT/env.txt"; cat "$OUT/env.txt" ;;
      check) check ;;
      folder) folder ;;
      nvdec) nvdec ;;
      nvfolder) nvfolder ;;
      native) native ;;
      nativebench) nativebench ;;
      profile) profile ;;
      speed) speed ;;
      hybrid) hybrid ;;
      scaling) scaling ;;
      batch) batch ;;
      bf16) bf16 ;;
      busy) busy ;;
      finish) finish ;;
      rows) rows ;;
      ab) ab ;;
      streams) streams ;;
    esac
  done
  echo "=== summary"
  summary
  echo "=== done at $(( $(date +%s) - T0 )) s"
}

# The device tool brings back at most 8 files a call: past that, every result but run.log and
# earlier bundles goes into one results-<time>.tar.gz (unpack it under the call's files_at).
bundle() {
  local n name
  n=$(find "$OUT" -maxdepth 1 -type f | wc -l)
  (( n <= 8 )) && return 0
  name=results-$(date +%s).tar.gz
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name run.log ! -name 'results-*.tar.gz' -printf '%P\n' > /tmp/bundle.list &&
    tar -czf "$name" -T /tmp/bundle.list && xargs -d '\n' rm -f < /tmp/bundle.list)
  echo "$n files: all but run.log are in $name"
}

if [ "${1:-}" = pack ] || [ -z "$OUT" ]; then
  main "$@"
else
  main "$@" 2>&1 | tee "$OUT/run.log"
  bundle
fi
