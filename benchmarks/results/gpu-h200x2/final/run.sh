#!/usr/bin/env bash
# Real-GPU check of the final servectl preflight CLI: a torch process holds 8 GiB on card 0.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src COLUMNS=160
mkdir -p /tmp/h200-model && echo '{"model_type":"x"}' > /tmp/h200-model/config.json && head -c 1048576 /dev/zero > /tmp/h200-model/model.safetensors
python3 tests/gpu/holder.py --card 0 --gib 8 --hold-seconds 120 > $OUT/holder.txt 2>&1 &
for i in $(seq 1 60); do grep -q ready $OUT/holder.txt && break; sleep 1; done
cat $OUT/holder.txt
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee $OUT/smi-apps.csv
cd .gpurun
( time python3 -m servectl preflight h200-pair ) > $OUT/preflight-h200-pair.txt 2>&1; echo "rc=$?" >> $OUT/preflight-h200-pair.txt
python3 -m servectl preflight h200-pair --json > $OUT/preflight-h200-pair.json 2>&1
python3 -m servectl preflight wrong-arch > $OUT/preflight-wrong-arch.txt 2>&1; echo "rc=$?" >> $OUT/preflight-wrong-arch.txt
python3 -m servectl preflight h200-pair --force gpu.exclusive --force image.pinned --force docker.engine --force docker.gpu_runtime --force port.free > $OUT/preflight-forced.txt 2>&1; echo "rc=$?" >> $OUT/preflight-forced.txt
cd .. && python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/pytest-gpu.txt 2>&1; echo "rc=$?" >> $OUT/pytest-gpu.txt
kill %1 2>/dev/null
cat $OUT/preflight-h200-pair.txt | tail -40
