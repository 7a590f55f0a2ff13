#!/usr/bin/env bash
# The training recipe as it runs on the lent GPU machine (one H200, 16 cores): training and
# validation sets with VMAF labels, then training, in one call (the machine keeps nothing).
#   Carried: .whl (av, vmaf-torch, yuvio wheels), .device/content_tv (scripts/content.py pack
#   --splits train,val), .device/backbone.pt (scripts/pack_backbone.py).
# Usage: bash scripts/device_train.sh OUT_DIR [TRAIN_CLIPS VAL_CLIPS EPOCHS]
set -euo pipefail
out=$1; train=${2:-3000}; val=${3:-300}; epochs=${4:-20}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p "$out"
rm -rf /tmp/data  # a warm machine keeps /tmp: never train on a stale set
start=$(date +%s)
python3 scripts/make_dataset.py --content .device/content_tv --out /tmp/data --train "$train" --val "$val" \
  --workers ${WORKERS:-15} --device ${DEVICE:-cuda} --deadline-s ${DEADLINE:-330}
echo "dataset: $(( $(date +%s) - start )) s"
python3 scripts/train.py --data /tmp/data --out "$out" --epochs "$epochs" --backbone .device/backbone.pt
echo "total: $(( $(date +%s) - start )) s"
cp /tmp/data/val.json "$out/"
