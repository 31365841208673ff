#!/bin/bash
# Train with either framework on a SLURM allocation; the same script on any cluster.
#
#   sbatch [sbatch options] slurm/run_slurm.sh torch|tf|torchrun CONFIG [--set key=value ...]
#   srun [srun options] slurm/run_slurm.sh torch|tf CONFIG [--set key=value ...]
#   sbatch [sbatch options] slurm/run_slurm.sh preflight [common.tools.preflight options]
#
# Under sbatch (or salloc) the script launches the training step itself (srun below). Started
# by srun it is already a task of a step: each task becomes one rank (common.launch.cluster reads
# SLURM_PROCID and the step's layout), and no step is launched from inside it.
#
#   torch     srun, one task per GPU (or per CPU slot): python -m torch_impl.train
#   tf        srun, one task per GPU (or per CPU slot): python -m tf_impl.train (one MWMS worker)
#   torchrun  srun, one task per node, each a torchrun agent (c10d rendezvous on the first node;
#             torch_impl.agent: torchrun plus SIGUSR1 passed to the ranks and their exit 75)
#             starting SUITE_NPROC_PER_NODE ranks (default: the node's GPUs, else 1)
#   preflight the cluster check of `python -m common.tools.preflight` (versions, devices, threads,
#             all-reduce bandwidth, 20 steps of every strategy and precision), as srun steps of
#             this job's layout; exits 1 naming the first failed check
#
# Addresses and ports come from the job (first node, port range from the job id), never from
# this file. Cluster specifics (modules, NCCL/InfiniBand settings, container hooks) go in a
# profile: SUITE_PROFILE=<name> sources slurm/profiles/<name>.env (see example.env).
# Results: $SUITE_RESULTS (default results/)/<job name>-<job id>/ with metrics.jsonl.
# Preemption: SIGUSR1 arrives 180 s before the time limit (or from `scancel --signal=USR1`);
# the ranks checkpoint at the next step boundary (with train.checkpoint_every_steps) or the
# epoch's end, exit 75, and the job requeues itself; when SLURM starts it again it goes on from
# that checkpoint (--auto-resume).
# A lost rank: SUITE_MAX_RESTARTS=K starts the failed step again, up to K times, in the same
# allocation, from the newest checkpoint (below).
#
#SBATCH --job-name=dual-mnist
#SBATCH --output=slurm-%x-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@180
set -uo pipefail

PREEMPTED_EXIT=75
die() { echo "error: $*" >&2; exit 2; }
usage="usage: sbatch [options] slurm/run_slurm.sh torch|tf|torchrun CONFIG [--set key=value ...]"

[[ $# -ge 1 ]] || die "$usage"
framework=$1
if [[ $framework == preflight ]]; then shift; set -- preflight none "$@"; fi
[[ $# -ge 2 ]] || die "$usage"
config=$2
shift 2
case $framework in
  torch) module=torch_impl.train ;;
  tf) module=tf_impl.train ;;
  torchrun) module=torch_impl.train ;;
  preflight) module=common.tools.preflight ;;
  *) die "unknown framework '$framework' (torch, tf or torchrun). $usage" ;;
esac
[[ -n ${SLURM_JOB_ID:-} ]] || die "not inside a SLURM job: submit it with sbatch. $usage"

root=${SUITE_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
cd "$root" || die "cannot enter the suite's folder $root (set SUITE_ROOT)"
# sbatch runs a copy of this script from its spool folder, so the suite is found through the
# folder the job was submitted from.
if [[ ! -f slurm/run_slurm.sh || ! -d common ]]; then
  die "$root is not the suite's folder (the job was submitted from elsewhere): submit from the suite's folder, or set SUITE_ROOT=/path/to/the/suite (sbatch --export=ALL,SUITE_ROOT=...)"
fi
[[ $framework == preflight || -f $config ]] || die "config '$config' not found in $root"
# SUITE_MAX_RESTARTS=K: a step that fails (a rank lost, not a refusal or a preemption) is started
# again in the same allocation, up to K times, and goes on from the newest checkpoint
# (--auto-resume); the torchrun variant gives K to torchrun's own --max-restarts instead.
max_restarts=${SUITE_MAX_RESTARTS:-0}
[[ $max_restarts =~ ^[0-9]+$ ]] || die "SUITE_MAX_RESTARTS must be a whole number of restarts (0, 1, ...), got '$max_restarts'"

if [[ -n ${SUITE_PROFILE:-} ]]; then
  profile=$SUITE_PROFILE
  [[ -f $profile ]] || profile=slurm/profiles/$SUITE_PROFILE.env
  [[ -f $profile ]] || die "profile '$SUITE_PROFILE' not found (looked for slurm/profiles/$SUITE_PROFILE.env)"
  # shellcheck source=/dev/null
  source "$profile"
fi
python=${SUITE_PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x $root/.venv/bin/python ]]; then python=$root/.venv/bin/python; else python=python3; fi
fi
read -ra python <<< "$python"  # may be a command with words: "apptainer exec img.sif python"

run_name=${SLURM_JOB_NAME}-${SLURM_JOB_ID}
results=${SUITE_RESULTS:-results}
# A job given GPUs trains on them: a framework that does not see them stops (exit 2) instead of
# training on the CPU; a --set dist.device=... of the caller still wins (it comes later).
device=()
if (( ${SLURM_GPUS_ON_NODE:-0} > 0 )); then device=(--set dist.device=gpu); fi
args=(--config "$config" --set "output.dir=$results" --set "output.run_name=$run_name"
      --set train.checkpoint_every_epochs=1 "${device[@]}" "$@" --auto-resume)
# srun stopped inheriting --cpus-per-task from the job in SLURM 22.05; pass it on to the step.
if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
if [[ -n ${SLURM_STEP_ID:-} ]]; then  # a task of an srun step: become its rank
  [[ $framework != torchrun ]] || die "the torchrun variant starts one agent per node itself: submit it with sbatch"
  [[ $framework != preflight ]] || die "the preflight launches its own steps: submit it with sbatch"
  if [[ ${SLURM_PROCID:-0} == 0 ]]; then
    echo "[$(date -u +%FT%TZ)] job $SLURM_JOB_ID step $SLURM_STEP_ID, ${SLURM_STEP_NUM_TASKS:-1} task(s) on ${SLURM_STEP_NODELIST:-?}: $framework $config $*"
  fi
  exec bash slurm/task.sh "${python[@]}" -m "$module" "${args[@]}"
fi
echo "[$(date -u +%FT%TZ)] job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST: $framework $config $*"
if [[ $framework == preflight ]]; then
  gpu=(); if (( ${SLURM_GPUS_ON_NODE:-0} > 0 )); then gpu=(--device gpu); fi
  exec "${python[@]}" -m common.tools.preflight --launcher slurm "${gpu[@]}" "$@"
fi

# The chief writes its run folder here; when it dies before its run_end, this script (or a
# surviving rank, or the torchrun agent) writes one (python -m common.core.run.run_end).
note_base=$results/.run-dir-${SLURM_JOB_ID}-${SLURM_RESTART_COUNT:-0}
endpoint=
if [[ $framework == torchrun ]]; then
  endpoint=$("${python[@]}" -m common.launch.environment rendezvous-endpoint) || exit 2
fi

start_step() {
  if [[ $framework == torchrun ]]; then
    local nproc=${SUITE_NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}
    srun --ntasks-per-node=1 --kill-on-bad-exit=1 \
      "${python[@]}" -m torch_impl.agent --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node="$nproc" \
      --rdzv-backend=c10d --rdzv-endpoint="$endpoint" --rdzv-id="$SLURM_JOB_ID" \
      --max-restarts="$max_restarts" -m "$module" "${args[@]}" &
  else  # as torchrun tells its ranks: which attempt this is, of how many restarts
    TORCHELASTIC_RESTART_COUNT=$attempt TORCHELASTIC_MAX_RESTARTS=$max_restarts \
      srun --kill-on-bad-exit=1 bash slurm/task.sh "${python[@]}" -m "$module" "${args[@]}" &
  fi
  step=$!
}

# SLURM's warning before the time limit reaches this shell; pass it to the step's tasks: the
# ranks, or the torchrun agents (torch_impl.agent), which pass it on to their ranks.
on_warning() {
  echo "[$(date -u +%FT%TZ)] SIGUSR1: asking the ranks to checkpoint and stop"
  scancel --signal=USR1 "$SLURM_JOB_ID"
}
trap on_warning USR1

attempt=0
while true; do
  export SUITE_RUN_DIR_NOTE=$note_base-$attempt
  start_step
  while true; do
    wait "$step"
    status=$?
    kill -0 "$step" 2>/dev/null || break  # wait returned for a trapped signal: keep waiting
  done
  if [[ $status -ne 0 && $status -ne $PREEMPTED_EXIT ]]; then
    "${python[@]}" -m common.core.run.run_end --note "$SUITE_RUN_DIR_NOTE" \
      --error "the srun step ended with status $status and no rank wrote the run_end (the chief was killed or stopped; see the job's output)"
  fi
  rm -f "$SUITE_RUN_DIR_NOTE"
  if [[ $status -eq 0 || $status -eq $PREEMPTED_EXIT || $status -eq 2 || $framework == torchrun ]] \
     || (( attempt >= max_restarts )); then
    break
  fi
  attempt=$((attempt + 1))
  echo "[$(date -u +%FT%TZ)] the step ended with status $status; starting it again (restart $attempt of $max_restarts, SUITE_MAX_RESTARTS) from the newest checkpoint"
done

if [[ $status -eq $PREEMPTED_EXIT ]]; then
  echo "[$(date -u +%FT%TZ)] checkpointed on preemption; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID" && exit 0
fi
exit "$status"
