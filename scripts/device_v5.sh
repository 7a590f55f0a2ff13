#!/usr/bin/env bash
# Model 5.0.0 on the lent GPU machine (one H200, 16 cores), in calls a warm machine chains (it
# keeps /tmp for about 30 s after a call). What travels is at most 64 MiB with the checkout
# (about 36 MiB of tracked files), so the code, PyAV, vmaf-torch and the packed content come in
# three parts; the last part's call also makes, trains and tests (one call, no test call after):
#   bash scripts/device_v5.sh pack P_TV P_TEST DIR   # here: DIR/c1, DIR/c2, DIR/c3 (.tar.xz parts)
#   bash scripts/device_v5.sh stage DIR/cN           # there: unpack a part into /tmp
#   bash scripts/device_v5.sh run OUT                # there: sets, two trainings, test and calibration
#                                                    # clips, both models' frame results
# The code runs from /tmp/code (this branch's scripts/ and vqa/, a copy: VQA_GIT_SHA names its
# commit); model 3 is the checkout's models/ (main's, 3.0.0); model 5 goes to /tmp/v5.
set -euo pipefail
export PYTHONUNBUFFERED=1
start=$(date +%s)
took() { echo "$1: $(( $(date +%s) - start )) s"; }
case $1 in
  pack)
    # The parts: c1 code + wheels (PyAV, vmaf-torch, yuvio, unpacked as pip --target places them)
    # + the first content files; c2 more content; c3 the rest and the test content. Content as
    # scripts/content.py packs it (models/README.md, "Model 5.0.0"); WHEELS: the unpacked wheels.
    tv=$2 test=$3 dir=$4
    root=$(cd "$(dirname "$0")/.." && pwd)
    mkdir -p "$dir"/c1 "$dir"/c2 "$dir"/c3 "$dir"/code/code
    cp -r "$root"/scripts "$root"/vqa "$dir"/code/code/
    find "$dir"/code/code -name __pycache__ -prune -exec rm -rf {} +
    git -C "$root" rev-parse HEAD > "$dir"/code/code/COMMIT
    tar -cJf "$dir"/c1/code.tar.xz -C "$dir"/code code
    tar -cJf "$dir"/c1/site-av.tar.xz -C "${WHEELS:?unpacked PyAV}"/av .
    tar -cJf "$dir"/c1/site-vmaf.tar.xz -C "$WHEELS"/vmaf .
    # Content in three lists, by size: about 2.8 MB with c1, 27 MB in c2, the rest with P_TEST in c3.
    (cd "$(dirname "$tv")" && find "$(basename "$tv")" -type f | sort) | python3 -c "
import os, sys
base = sys.argv[1]
files = [f.strip() for f in sys.stdin]
parts, size = [[], [], []], 0
for f in files:
    size += os.path.getsize(os.path.join(base, f))
    parts[0 if size < 2.8e6 else 1 if size < 30e6 else 2].append(f)
for name, p in zip('abc', parts):
    open(f'$dir/p_tv_{name}.txt', 'w').write('\n'.join(p) + '\n')
" "$(dirname "$tv")"
    for n in a b c; do
      c=$([ $n = a ] && echo c1 || ([ $n = b ] && echo c2 || echo c3))
      tar -cJf "$dir/$c/p_tv_$n.tar.xz" -C "$(dirname "$tv")" -T "$dir/p_tv_$n.txt"
    done
    tar -cJf "$dir"/c3/p_test.tar.xz -C "$(dirname "$test")" "$(basename "$test")"
    du -b "$dir"/c1 "$dir"/c2 "$dir"/c3 ;;
  stage)
    mkdir -p /tmp/site
    for f in "$2"/*.tar.xz; do
      case $(basename "$f") in
        site*) tar -xJf "$f" -C /tmp/site ;;
        *) tar -xJf "$f" -C /tmp ;;
      esac
    done
    ls /tmp; took stage ;;
  run)
    out=$2; mkdir -p "$out"
    export PYTHONPATH=/tmp/site:/tmp/code
    export VQA_GIT_SHA=$(cat /tmp/code/COMMIT 2>/dev/null || echo unknown)
    S=/tmp/code/scripts
    limit=${LIMIT:-560}
    rm -rf /tmp/data /tmp/t /tmp/cal /tmp/s /tmp/m_* /tmp/v5 /tmp/logs && mkdir -p /tmp/s /tmp/logs
    trap 'cp /tmp/data/*.json /tmp/logs/ 2>/dev/null; tar -cJf "$out/logs.tar.xz" -C /tmp logs' EXIT  # whatever happens
    # 1. Sets (all 15 cores): validation keeps model 3's plan (seed 20261201 + 1, KINDS), plus the
    # pair check (VAL_PAIRS, set aside from training); training is new clips (its own seed) in
    # model 5's mix (make_dataset.TRAIN_KINDS_V5, twins).
    python3 $S/make_dataset.py --content /tmp/p_tv --out /tmp/data --val 400 --train ${CLIPS:-2800} \
      --train-seed 20261205 --mix v5 --workers 15 --device cuda 2>&1 | tee /tmp/logs/data_log.txt
    took dataset
    # 2. Two fine-tunings from model 3 side by side on the GPU (peak learning rates 3e-4, model 4's
    # pick, and 1e-4), twins' pair loss on; each keeps its best epoch so far on disk. Meanwhile the
    # cores make the test clips (the 543 of model 3's plan that threshold_test.py keeps with 10
    # ladders) and the calibration clips, then model 3 scores the test clips.
    left=$(( limit - ($(date +%s) - start) - 70 ))
    deadline=$(( $(date +%s) + left ))
    for lr in 3e-4 1e-4; do
      timeout $left python3 $S/train.py --data /tmp/data --out /tmp/m_$lr --epochs ${EPOCHS:-12} --lr $lr \
        --pair-weight 0.5 --pair-margin 2.0 --init models/vqa-effl0.pt > /tmp/logs/train_log_$lr.txt 2>&1 &
    done
    (
      timeout $(( left / 2 )) python3 $S/threshold_test.py make --content /tmp/p_test --out /tmp/t \
        --ladders 10 --workers 9 --device cuda > /tmp/logs/make_test.txt 2>&1 &
      timeout $(( left / 2 )) python3 $S/calibrate.py --content /tmp/p_tv --clips 400 --real --cache /tmp/cal \
        --make-only --workers 5 > /tmp/logs/make_cal.txt 2>&1 &
      wait || true
      n=${PARTS:-5}
      for k in $(seq 0 $((n - 1))); do
        timeout $(( deadline - $(date +%s) )) python3 $S/threshold_test.py score --data /tmp/t \
          --model-dir models --backend pytorch --workers 1 --cores 1 --shard $k/$n \
          --frames /tmp/s/v3_test_$k.pkl > /tmp/s/v3_test_$k.txt 2>&1 &
      done
      wait || true
    ) &
    wait || true
    took "training, test clips, model 3 scored"
    # 3. Validation alone picks (train.py's selection: SRCC + macro-F1 + half the pair check).
    best=$(python3 -c "
import json
import os
m = {lr: json.load(open(f'/tmp/m_{lr}/val_metrics.json')) for lr in ('3e-4', '1e-4')
     if os.path.exists(f'/tmp/m_{lr}/val_metrics.json')}
print(max(m, key=lambda lr: m[lr]['selection']) if m else '')")
    echo "picked lr $best" | tee /tmp/logs/picked.txt
    [ -n "$best" ] || exit 1
    mkdir -p /tmp/v5 && cp /tmp/m_$best/vqa-effl0.pt /tmp/v5/
    python3 $S/export.py --weights /tmp/v5/vqa-effl0.pt --out /tmp/v5 --version 5.0.0 --pytorch-only \
      --decision-from models/vqa.json > /dev/null
    for lr in 3e-4 1e-4; do cp /tmp/m_$lr/val_metrics.json /tmp/logs/val_metrics_$lr.json || true; done
    cp /tmp/v5/vqa-effl0.pt "$out/weights_$best.pt"
    # 4. Model 5's frame results on the test clips and the calibration clips, in parts side by side.
    n=${PARTS:-5}
    left=$(( limit - ($(date +%s) - start) - 15 ))
    for k in $(seq 0 $((n - 1))); do
      timeout $left python3 $S/threshold_test.py score --data /tmp/t --model-dir /tmp/v5 --backend pytorch --workers 1 \
        --cores 1 --shard $k/$n --frames /tmp/s/v5_test_$k.pkl > /tmp/s/v5_test_$k.txt 2>&1 &
      timeout $left python3 $S/threshold_test.py score --clips /tmp/cal --model-dir /tmp/v5 --backend pytorch --workers 1 \
        --cores 1 --shard $k/$n --frames /tmp/s/v5_cal_$k.pkl > /tmp/s/v5_cal_$k.txt 2>&1 &
    done
    wait || true
    took scoring
    cp /tmp/t/test.jsonl /tmp/s/ || true
    cp /tmp/cal/labels.json /tmp/s/ || true
    # Files come back at most 16 MiB each: the frame results travel in parts
    # (cat results.tar.xz.* | xz -dc | tar -x).
    tar -cf - -C /tmp s | xz -6 -T16 | split -b 15M -d - "$out/results.tar.xz."
    took total ;;
  *) echo "usage: device_v5.sh pack|stage|run ..." >&2; exit 2 ;;
esac
