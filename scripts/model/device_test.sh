#!/usr/bin/env bash
# Decision thresholds and the test set, on the lent GPU machine, after device_train.sh:
#   bash scripts/model/device_test.sh MODEL_DIR CONTENT_TV CONTENT_TEST OUT [LADDERS RANDOM]
# 1. calibrate.py chooses each head's threshold on clips made from validation content (its real
#    pictures as they are among the negatives, at most 1% of them flagged per head), scored
#    by vqa.Scorer (PyTorch backend: OpenVINO is not installed there), and writes them into the
#    manifest's decision block;
# 2. make_dataset.py makes the test set from test content (ladders, random clips, every test
#    source as it is, every PolyU test pair) with VMAF labels;
# 3. evaluate.py test scores every clip end to end under that manifest, writing each record.
# Metrics are computed from the records (evaluate.py metrics), here or anywhere.
set -euo pipefail
models=$1; tv=$2; test=$3; out=$4; ladders=${5:-30}; n=${6:-200}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p "$out"
start=$(date +%s)
python3 scripts/model/export.py --weights "$models/vqa-effl0.pt" --out "$models" --version 3.0.0 --pytorch-only > /dev/null
python3 scripts/model/calibrate.py --content "$tv" --clips ${CAL_CLIPS:-400} --real --cap 0.01 --model-dir "$models" --backend pytorch \
  --workers ${WORKERS:-14} --out "$out/calibration.json" --manifest "$models/vqa.json" | tail -40
echo "calibration: $(( $(date +%s) - start )) s"
rm -rf /tmp/testdata
python3 scripts/model/make_dataset.py --content "$test" --out /tmp/testdata --test "$n" --test-ladders "$ladders" \
  --workers ${WORKERS:-15} --device ${DEVICE:-cuda}
cp /tmp/testdata/test.json "$out/"
echo "test set: $(( $(date +%s) - start )) s"
python3 scripts/model/evaluate.py test --data /tmp/testdata --model-dir "$models" --backend pytorch \
  --workers ${SCORE_WORKERS:-12} --out "$out/test_metrics.json" \
  --records "$out/test_records.jsonl" > /dev/null || echo "metrics failed; the records are in $out"
echo "total: $(( $(date +%s) - start )) s"
# A sample of the clips comes back, to score them here with OpenVINO (FP32 and INT8) as well.
(cd /tmp/testdata/test_clips && ls | sort | awk 'NR % 12 == 1' | tar -cf "$out/test_clips_sample.tar" -T -)
