# iteration speed (kernelsmith side) then the eval overhead (issue 17), one device call
set -u; T0=$(date +%s)
bash bench/device.sh check > $OUT/check.log 2>&1
export PYTHONPATH=/tmp/site:$PWD
command -v bwrap >/dev/null || { mkdir -p /tmp/bw && dpkg -x .dev/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH; }
mkdir -p $OUT/iter $OUT/overhead
OUT=$OUT/iter ITER_TASKS="level2/45_Gemm_Sigmoid_LogSumExp level1/21_Sigmoid" ITER=2 SIDES=kernelsmith LIMIT=330 bash bench/device.sh iteration-speed
echo "iteration done at $(( $(date +%s) - T0 )) s"
K=.dev/kernelbench; C=bench/candidates
cp $K/level1/89_cumsum.py $C/level1_89_cumsum/model.py
cp $K/level2/45_Gemm_Sigmoid_LogSumExp.py $C/level2_45_Gemm_Sigmoid_LogSumExp/model.py
LEFT=$(( 585 - ($(date +%s) - T0) ))
timeout $LEFT python3 bench/eval_overhead.py examples/rms_norm_rows/model.py:examples/rms_norm_rows/cuda/model_new.py \
  $C/level2_45_Gemm_Sigmoid_LogSumExp/model.py:$C/level2_45_Gemm_Sigmoid_LogSumExp/model_new.py \
  $C/level1_89_cumsum/model.py:$C/level1_89_cumsum/model_new.py \
  --repeats 2 --out $OUT/overhead 2>&1 | grep -v Warn | tee $OUT/overhead/overhead.log | tail -12
echo "all done at $(( $(date +%s) - T0 )) s"
