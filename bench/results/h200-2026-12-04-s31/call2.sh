# the pool on level2/45 (1 and 3 lanes), then the cold build with the left time
set -u; T0=$(date +%s)
bash bench/device.sh check > $OUT/check.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
command -v bwrap >/dev/null || { mkdir -p /tmp/bw && dpkg -x .dev/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH; }
C=bench/candidates/level2_45_Gemm_Sigmoid_LogSumExp; cp .dev/kernelbench/level2/45_Gemm_Sigmoid_LogSumExp.py $C/model.py
mkdir -p $OUT/pool $OUT/cold
timeout 400 python3 bench/pool.py --reference $C/model.py --candidate $C/model_new.py --jobs 4 --evals-per-gpu 1,3 \
  --gpus 0 --no-kill --out $OUT/pool 2>&1 | grep -v Warn | tee $OUT/pool/pool.log | tail -10
echo "pool done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 585 - ($(date +%s) - T0) ))
timeout $LEFT python3 bench/cold_build.py $C/kernels --device cuda --runs 1 --out $OUT/cold 2>&1 | grep -v Warn \
  | tee $OUT/cold/cold_build.log | tail -8
echo "all done at $(( $(date +%s) - T0 )) s"
