#!/usr/bin/env bash
# The training recipe as it runs on the lent GPU machine (one H200, 16 cores), in two calls a
# warm machine chains (it keeps /tmp for about 30 s after a call):
#   bash scripts/model/device_train.sh data CONTENT TRAIN_CLIPS VAL_CLIPS   # sets with VMAF labels -> /tmp/data
#   bash scripts/model/device_train.sh train OUT EPOCHS [INIT_WEIGHTS]       # train on /tmp/data -> OUT
# MIX picks make_dataset.py's training mix (default v4), LR train.py's learning rate (default 1e-3);
# DATA_ARGS and TRAIN_ARGS are added to make_dataset.py's and train.py's arguments.
# PyAV, vmaf-torch and yuvio are installed under /tmp/site (staged from carried wheels).
# The sets are made from a clip count and a seed, never a deadline: the same arguments make
# the same clips (H.264 encodes aside, which are not bit-exact between runs there).
set -euo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
start=$(date +%s)
case $1 in
  data)
    rm -rf /tmp/data  # a warm machine keeps /tmp: never train on a stale set
    python3 scripts/model/make_dataset.py --content "$2" --out /tmp/data --train "$3" --val "$4" \
      --workers ${WORKERS:-15} --device ${DEVICE:-cuda} --mix ${MIX:-v4} ${DATA_ARGS:-}
    echo "dataset: $(( $(date +%s) - start )) s" ;;
  train)
    mkdir -p "$2"
    init=(); [ -n "${4:-}" ] && init=(--init "$4")
    python3 scripts/model/train.py --data /tmp/data --out "$2" --epochs "$3" --lr ${LR:-1e-3} "${init[@]}" ${TRAIN_ARGS:-} 2>&1 | tee "$2/train_log.txt"
    cp /tmp/data/val.json "$2/"
    echo "training: $(( $(date +%s) - start )) s" ;;
  *) echo "usage: device_train.sh data|train ..." >&2; exit 2 ;;
esac
