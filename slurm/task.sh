#!/bin/bash
# One srun task: bind it to its own GPU, then run the command.
#
# With --gpus-per-task SLURM already shows each task its own GPU(s). With --gpus-per-node (or
# --gres=gpu:N) every task sees all the node's GPUs; then task SLURM_LOCALID takes GPU number
# SLURM_LOCALID. A task beyond the node's GPUs is left seeing them all, unbound: the training
# program then refuses to start on a GPU (exit 2, common.core.measure.devices.place), since two ranks on one
# GPU fail in NCCL ("Duplicate GPU detected"); with dist.device=cpu it runs on the CPU.
# NCCL between GPUs of one node needs peer access: when cgroups confine each task to its own
# GPU (--gpus-per-task with ConstrainDevices=yes), the ranks cannot open each other's devices
# and NCCL falls back to slower paths or fails; use --gpus-per-node there.
if [[ -n ${CUDA_VISIBLE_DEVICES:-} && ${CUDA_VISIBLE_DEVICES} != NoDevFiles ]]; then
  IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"
  local_id=${SLURM_LOCALID:-0}
  if [[ -n ${SLURM_GPUS_PER_TASK:-} ]]; then
    export SUITE_TASK_GPU_BOUND=1
  elif (( local_id < ${#gpus[@]} )); then
    export CUDA_VISIBLE_DEVICES=${gpus[$local_id]} SUITE_TASK_GPU_BOUND=1
  fi
fi
exec "$@"
