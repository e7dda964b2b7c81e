# the pool on level2/45, 3 lanes sharing the GPU, each run saved as it ends
set -u; T0=$(date +%s)
bash bench/device.sh check > $OUT/check.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
command -v bwrap >/dev/null || { mkdir -p /tmp/bw && dpkg -x .dev/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH; }
C=bench/candidates/level2_45_Gemm_Sigmoid_LogSumExp; cp .dev/kernelbench/level2/45_Gemm_Sigmoid_LogSumExp.py $C/model.py
mkdir -p $OUT/pool
timeout ${LIMIT:-380} python3 bench/pool.py --reference $C/model.py --candidate $C/model_new.py --jobs 5 --evals-per-gpu 3,1 \
  --gpus 0 --no-kill --out $OUT/pool 2>&1 | grep -v Warn | tee $OUT/pool/pool.log | tail -10
echo "all done at $(( $(date +%s) - T0 )) s"
