#!/usr/bin/env bash
# Model 5.0.0 on the lent GPU machine (one H200, 16 cores), in calls a warm machine chains (it
# keeps /tmp for about 30 s after a call). What travels is at most 64 MiB with the checkout
# (about 40 MiB of tracked files), so the code, PyAV, vmaf-torch and the packed content come in
# three parts; the last part's call also makes, trains and tests (one call, no test call after):
#   bash scripts/device_v5.sh pack P_TV P_TEST DIR   # here: DIR/c1, DIR/c2, DIR/c3 (.tar.xz parts)
#   bash scripts/device_v5.sh stage DIR/cN           # there: unpack a part into /tmp
#   bash scripts/device_v5.sh run OUT                # there: sets, two trainings, test and calibration
#                                                    # clips, both models' frame results (STEP=data,
#                                                    # then STEP=train: the same in two calls)
# The code runs from /tmp/code (this branch's scripts/ and vqa/, a copy: VQA_GIT_SHA names its
# commit); model 3 is the checkout's models/ (main's, 3.0.0); model 5 goes to /tmp/v5.
# MIX=v6 VERSION=6.0.0 makes the next one the same way from make_dataset's v6 mix (a whole camera
# set aside for the pair check, the smearing filter at the working scale); its files keep v5's names.
set -euo pipefail
export PYTHONUNBUFFERED=1
start=$(date +%s)
took() { echo "$1: $(( $(date +%s) - start )) s"; }
until_() { local s=$(( $1 - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }  # seconds left before $1, at least 1
case $1 in
  pack)
    # The parts: c1 PyAV (unpacked as pip --target places it; about 24.7 MB); c2 the code,
    # vmaf-torch and yuvio, and most of the content; c3 the rest and the test content. Content as
    # scripts/content.py packs it (models/README.md, "Model 5.0.0"); WHEELS: the unpacked wheels.
    tv=$2 test=$3 dir=$4
    root=$(cd "$(dirname "$0")/.." && pwd)
    mkdir -p "$dir"/c1 "$dir"/c2 "$dir"/c3 "$dir"/code/code
    cp -r "$root"/scripts "$root"/vqa "$dir"/code/code/
    find "$dir"/code/code -name __pycache__ -prune -exec rm -rf {} +
    git -C "$root" rev-parse HEAD > "$dir"/code/code/COMMIT
    find "$dir"/code/code/scripts/results -delete  # measurements, not code: the call's size is tight
    tar -cJf "$dir"/c2/code.tar.xz -C "$dir"/code code
    tar -cJf "$dir"/c1/site-av.tar.xz -C "${WHEELS:?unpacked PyAV}"/av .
    tar -cJf "$dir"/c2/site-vmaf.tar.xz -C "$WHEELS"/vmaf .
    # Content in two lists, by size: the first 24 MB in c2, the rest with P_TEST in c3 (each part
    # under 25 MB: the checkout takes about 41 of the 67 MB a call carries).
    (cd "$(dirname "$tv")" && find "$(basename "$tv")" -type f | sort) | python3 -c "
import os, sys
base = sys.argv[1]
files = [f.strip() for f in sys.stdin]
parts, size = [[], [], []], 0
for f in files:
    size += os.path.getsize(os.path.join(base, f))
    parts[1 if size < 24e6 else 2].append(f)
for name, p in zip('abc', parts):
    open(f'$dir/p_tv_{name}.txt', 'w').write('\n'.join(p) + '\n')
" "$(dirname "$tv")"
    for n in b c; do
      c=$([ $n = b ] && echo c2 || echo c3)
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
    T=${ROOT_TMP:-/tmp}  # where the parts are staged and everything is made (a dry run: elsewhere)
    export PYTHONPATH=$T/site:$T/code
    export VQA_GIT_SHA=$(cat $T/code/COMMIT 2>/dev/null || echo unknown)
    S=$T/code/scripts
    # Every part staged on this machine (a machine that went back between calls starts bare)?
    python3 -c "
import json, os, sys
for d in ('$T/p_tv', '$T/p_test'):
    for e in json.load(open(d + '/content.json')):
        for k in ('file', 'noisy'):
            if k in e and not os.path.exists(os.path.join(d, e[k])):
                sys.exit(f'not staged: {d}/{e[k]}')
import av, vmaf_torch  # noqa: F401
print('staged')" || exit 3
    limit=${LIMIT:-500}  # seconds: every step ends in time for the frame results to come back
    # STEP=data makes the sets alone and STEP=train the rest from them, in the next call on the warm
    # machine: each gets a whole call (a set of 2,400 clips took about 400 s, more than half of one).
    step=${STEP:-all}
    [ -n "${KEEP_DATA:-}" ] || [ "$step" = train ] || rm -rf $T/data  # KEEP_DATA: a dry run's small sets
    rm -rf $T/t $T/cal $T/s $T/m_* $T/v5 $T/logs && mkdir -p $T/s $T/logs
    trap 'cp $T/data/*.json $T/logs/ 2>/dev/null; tar -cJf "$out/logs.tar.xz" -C $T logs' EXIT  # whatever happens
    if [ "$step" != train ]; then
    # 1. Sets (all 15 cores): validation keeps model 3's plan (seed 20261201 + 1, KINDS), plus the
    # pair check (VAL_PAIRS, set aside from training); training is new clips (its own seed) in
    # model 5's mix (make_dataset.TRAIN_KINDS_V5, twins).
    python3 $S/make_dataset.py --content $T/p_tv --out $T/data --val 400 --train ${CLIPS:-2400} \
      --train-seed 20261205 --mix ${MIX:-v5} --workers 15 --device ${DEVICE:-cuda} 2>&1 | tee $T/logs/data_log.txt
    took dataset
    fi
    [ "$step" != data ] || exit 0
    [ -f $T/data/train.json ] || { echo "no sets in $T/data: run STEP=data first" >&2; exit 3; }
    # 2. Two fine-tunings from model 3 side by side on the GPU (peak learning rates 3e-4, model 4's
    # pick, and 1e-4), twins' pair loss on; each keeps its best epoch so far on disk and stops in
    # time for step 4. Meanwhile the cores make the test clips (the 543 of model 3's plan that
    # threshold_test.py keeps with 10 ladders) and the calibration clips (each given TEST_S
    # seconds), then model 3 scores the test clips.
    deadline=$(( start + limit - ${SCORE_S:-75} ))
    n=${PARTS:-5}
    trainings=""
    for lr in 3e-4 1e-4; do
      OMP_NUM_THREADS=2 timeout $(until_ $deadline) python3 $S/train.py --data $T/data --out $T/m_$lr \
        --epochs ${EPOCHS:-12} --lr $lr --pair-weight 0.5 --pair-margin 2.0 --init models/vqa-effl0.pt \
        > $T/logs/train_log_$lr.txt 2>&1 &
      trainings="$trainings $!"
    done
    timeout ${TEST_S:-130} python3 $S/threshold_test.py make --content $T/p_test --out $T/t \
      --ladders 10 --workers 9 --device ${DEVICE:-cuda} > $T/logs/make_test.txt 2>&1 &
    made_test=$!
    timeout ${TEST_S:-130} python3 $S/calibrate.py --content $T/p_tv --clips 400 --real --cache $T/cal \
      --make-only --workers 5 > $T/logs/make_cal.txt 2>&1 &
    made_cal=$!
    score() {  # score MODEL_DIR NAME ARGS...: frame results in n parts side by side, in the background
      local dir=$1 name=$2; shift 2
      for k in $(seq 0 $((n - 1))); do
        timeout $(until_ $(( start + limit - 10 ))) python3 $S/threshold_test.py score "$@" --model-dir $dir \
          --backend pytorch --workers 1 --cores 1 --shard $k/$n --frames $T/s/${name}_$k.pkl > $T/s/${name}_$k.txt 2>&1 &
      done
    }
    wait $made_test || true
    took "test clips"
    score models v3_test --data $T/t
    wait $trainings || true
    took training
    # 3. Validation alone picks (train.py's selection: SRCC + macro-F1 + half the pair check).
    best=$(python3 -c "
import json
import os
m = {lr: json.load(open(f'$T/m_{lr}/val_metrics.json')) for lr in ('3e-4', '1e-4')
     if os.path.exists(f'$T/m_{lr}/val_metrics.json')}
print(max(m, key=lambda lr: m[lr]['selection']) if m else '')")
    echo "picked lr $best" | tee $T/logs/picked.txt
    [ -n "$best" ] || exit 1
    mkdir -p $T/v5 && cp $T/m_$best/vqa-effl0.pt $T/v5/
    python3 $S/export.py --weights $T/v5/vqa-effl0.pt --out $T/v5 --version ${VERSION:-5.0.0} --pytorch-only \
      --decision-from models/vqa.json > /dev/null
    for lr in 3e-4 1e-4; do cp $T/m_$lr/val_metrics.json $T/logs/val_metrics_$lr.json || true; done
    cp $T/v5/vqa-effl0.pt "$out/weights_$best.pt"
    # 4. Model 5's frame results on the test clips and (once made) the calibration clips.
    score $T/v5 v5_test --data $T/t
    wait $made_cal || true
    took "calibration clips"
    score $T/v5 v5_cal --clips $T/cal
    wait || true
    took "both models scored"
    cp $T/t/test.jsonl $T/s/ || true
    cp $T/cal/labels.json $T/s/ || true
    # Files come back at most 16 MiB each: the frame results travel in parts
    # (cat results.tar.xz.* | xz -dc | tar -x).
    tar -cf - -C $T s | xz -6 -T16 | split -b 15M -d - "$out/results.tar.xz."
    took total ;;
  *) echo "usage: device_v5.sh pack|stage|run ..." >&2; exit 2 ;;
esac
