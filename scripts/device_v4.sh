#!/usr/bin/env bash
# Model 4.0.0 on the lent GPU machine (one H200, 16 cores), in calls a warm machine chains (it
# keeps /tmp for about 30 s after a call). What travels is at most 64 MiB with the checkout
# (36 MiB of it tracked files), so the code, PyAV and the packed content come in parts:
#   bash scripts/device_v4.sh stage DIR          # unpack DIR/*.tar.xz into /tmp (code, PyAV, content)
#   bash scripts/device_v4.sh train OUT          # sets with VMAF labels, two trainings, the one validation picks
#   bash scripts/device_v4.sh test OUT           # test clips, calibration clips, both models' frame results
# The code runs from /tmp/code (this branch's scripts/ and vqa/, a copy: VQA_GIT_SHA names its
# commit); model 3 is the checkout's models/ (main's, 3.0.0); model 4 goes to /tmp/v4.
set -euo pipefail
export PYTHONPATH=/tmp/site:/tmp/code PYTHONUNBUFFERED=1
export VQA_GIT_SHA=$(cat /tmp/code/COMMIT 2>/dev/null || echo unknown)
S=/tmp/code/scripts
start=$(date +%s)
took() { echo "$1: $(( $(date +%s) - start )) s"; }
case $1 in
  stage)
    mkdir -p /tmp/site
    for f in "$2"/*.tar.xz; do
      case $(basename "$f") in
        site*) tar -xJf "$f" -C /tmp/site ;;  # wheels unpacked as pip --target would place them
        *) tar -xJf "$f" -C /tmp ;;
      esac
    done
    ls /tmp; took stage ;;
  train)
    out=$2; mkdir -p "$out"
    rm -rf /tmp/data  # a warm machine keeps /tmp: never train on a stale set
    # Validation keeps model 3's plan (seed 20261201 + 1, KINDS); training is new clips (its own
    # seed) in model 4's mix (make_dataset.TRAIN_KINDS).
    python3 $S/make_dataset.py --content /tmp/p_tv --out /tmp/data --val 400 --train ${CLIPS:-3240} \
      --train-seed 20261204 --mix v4 --workers 15 --device cuda 2>&1 | tee "$out/data_log.txt"
    took dataset
    # Two fine-tunings from model 3 side by side (the GPU and the cores are idle enough): the
    # recipe's peak learning rate, and a third of it (keeps more of what model 3 learnt).
    # Each keeps its best epoch so far on disk; both stop before the call's LIMIT (seconds) runs out.
    left=$(( ${LIMIT:-570} - ($(date +%s) - start) - 25 ))
    for lr in 1e-3 3e-4; do
      timeout $left python3 $S/train.py --data /tmp/data --out /tmp/m_$lr --epochs 16 --lr $lr \
        --init models/vqa-effl0.pt > "$out/train_log_$lr.txt" 2>&1 &
    done
    wait
    took training
    # Validation alone picks (train.py's rule: SRCC + defect macro-F1 at 0.5).
    best=$(python3 -c "
import json
import os
m = {lr: json.load(open(f'/tmp/m_{lr}/val_metrics.json')) for lr in ('1e-3', '3e-4')
     if os.path.exists(f'/tmp/m_{lr}/val_metrics.json')}
print(max(m, key=lambda lr: m[lr]['srcc_all'] + m[lr]['macro_f1_model']))")
    echo "picked lr $best"
    rm -rf /tmp/v4 && mkdir -p /tmp/v4 && cp /tmp/m_$best/vqa-effl0.pt /tmp/v4/
    python3 $S/export.py --weights /tmp/v4/vqa-effl0.pt --out /tmp/v4 --version 4.0.0 --pytorch-only \
      --decision-from models/vqa.json > /dev/null
    for lr in 1e-3 3e-4; do
      cp /tmp/m_$lr/vqa-effl0.pt "$out/weights_$lr.pt" || true
      cp /tmp/m_$lr/val_metrics.json "$out/val_metrics_$lr.json" || true
    done
    echo "$best" > "$out/picked.txt"
    took total ;;
  test)
    out=$2; mkdir -p "$out"
    rm -rf /tmp/t /tmp/cal /tmp/s && mkdir -p /tmp/s
    # Test clips (VMAF labels on the GPU): the 543 of model 3's 883-clip plan that
    # threshold_test.py keeps with 10 ladders; calibration clips from validation content.
    # Every step ends before the call's LIMIT (seconds): what was made or scored by then is kept
    # (threshold_test.py makes real pictures first, then random clips, then ladders).
    limit=${LIMIT:-300}
    timeout $(( limit * 45 / 100 )) python3 $S/threshold_test.py make --content /tmp/p_test --out /tmp/t \
      --ladders 10 --workers 10 --device cuda > "$out/make_test.txt" 2>&1 &
    timeout $(( limit * 45 / 100 )) python3 $S/calibrate.py --content /tmp/p_tv --clips 400 --real --cache /tmp/cal \
      --make-only --workers 5 > "$out/make_cal.txt" 2>&1 &
    wait
    took clips
    # Frame results, PyTorch backend, in interleaved parts side by side: model 3 and model 4 on
    # the test clips, model 4 on the calibration clips (thresholds are chosen from them afterwards).
    n=${PARTS:-5}
    left=$(( limit - ($(date +%s) - start) - 20 ))
    for k in $(seq 0 $((n - 1))); do
      timeout $left python3 $S/threshold_test.py score --data /tmp/t --model-dir models --backend pytorch --workers 1 --cores 1 \
        --shard $k/$n --frames /tmp/s/v3_test_$k.pkl > /tmp/s/v3_test_$k.txt 2>&1 &
      timeout $left python3 $S/threshold_test.py score --data /tmp/t --model-dir /tmp/v4 --backend pytorch --workers 1 --cores 1 \
        --shard $k/$n --frames /tmp/s/v4_test_$k.pkl > /tmp/s/v4_test_$k.txt 2>&1 &
      timeout $left python3 $S/threshold_test.py score --clips /tmp/cal --model-dir /tmp/v4 --backend pytorch --workers 1 --cores 1 \
        --shard $k/$n --frames /tmp/s/v4_cal_$k.pkl > /tmp/s/v4_cal_$k.txt 2>&1 &
    done
    wait || true
    took scoring
    cp /tmp/t/test.jsonl /tmp/s/ || true
    cp /tmp/cal/labels.json /tmp/s/ || true
    # Files come back at most 16 MiB each: the frame results (about 32 MiB) travel in parts
    # (cat results.tar.xz.* | xz -dc | tar -x).
    tar -cf - -C /tmp s | xz -6 -T16 | split -b 15M -d - "$out/results.tar.xz."
    took total ;;
  *) echo "usage: device_v4.sh stage|train|test ..." >&2; exit 2 ;;
esac
