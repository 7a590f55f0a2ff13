#!/usr/bin/env bash
# The whole training recipe as it ran on the lent GPU machine (one H200, 16 cores):
# dataset generation with VMAF labels, training, and the validation predictions.
#   Carried: .whl (av, vmaf-torch, yuvio wheels), .device/content (scripts/pack_content.py),
#   .device/backbone.pt (scripts/pack_content.py --backbone).
# Usage: bash scripts/device_train.sh OUT_DIR [TRAIN_CLIPS VAL_CLIPS EPOCHS]
set -euo pipefail
out=$1; train=${2:-4000}; val=${3:-500}; epochs=${4:-14}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p "$out"
start=$(date +%s)
python3 scripts/make_dataset.py --content .device/content --out /tmp/data --train "$train" --val "$val" \
  --workers ${WORKERS:-14} --device ${DEVICE:-cuda}
echo "dataset: $(( $(date +%s) - start )) s"
python3 scripts/train.py --data /tmp/data --out "$out" --epochs "$epochs" --backbone .device/backbone.pt
echo "total: $(( $(date +%s) - start )) s"
cp /tmp/data/val.json "$out/"
# As many validation clips as fit in three 15 MB archives, in generation order.
(cd /tmp/data/val_clips && ls | sort | python3 -c '
import os, sys, tarfile
names = [l.strip() for l in sys.stdin]; part, size, tf = 0, 0, None
for n in names:
    s = os.path.getsize(n)
    if tf is None or size + s > 15_000_000:
        if tf: tf.close()
        part += 1
        if part > 3: break
        tf, size = tarfile.open(f"'"$out"'/val_clips_{part}.tar", "w"), 0
    tf.add(n); size += s
tf.close()')
