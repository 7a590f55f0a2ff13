#!/usr/bin/env bash
# The test set, made and scored on the lent GPU machine: clips from test content only, VMAF
# labels on the GPU, then every clip scored end to end by vqa.Scorer (PyAV decode workers,
# the PyTorch backend, vqa.aggregate) and the metrics computed from those records.
#   Carried: .whl (av, vmaf-torch, yuvio wheels), .device/content_test (scripts/content.py pack
#   --splits test); models/ holds vqa-effl0.pt.
# Usage: bash scripts/device_test.sh OUT_DIR [LADDER_SOURCES RANDOM_CLIPS]
set -euo pipefail
out=$1; ladders=${2:-40}; n=${3:-240}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p "$out"
start=$(date +%s)
python3 scripts/export.py --weights models/vqa-effl0.pt --out models --pytorch-only > /dev/null
python3 scripts/make_dataset.py --content .device/content_test --out /tmp/testdata --test "$n" \
  --test-ladders "$ladders" --workers ${WORKERS:-15} --device ${DEVICE:-cuda}
echo "test set: $(( $(date +%s) - start )) s"
python3 scripts/evaluate.py test --data /tmp/testdata --model-dir models --backend pytorch \
  --workers ${SCORE_WORKERS:-10} --out "$out/test_metrics.json" --records "$out/test_records.jsonl"
echo "total: $(( $(date +%s) - start )) s"
cp /tmp/testdata/test.json "$out/"
# A sample of the clips comes back, to score them here with OpenVINO as well.
(cd /tmp/testdata/test_clips && ls | sort | awk 'NR % 12 == 1' | tar -cf "$out/test_clips_sample.tar" -T -)
