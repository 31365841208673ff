#!/bin/bash
# One srun task: bind it to one GPU, then run the command.
#
# With --gpus-per-task SLURM already shows each task its own GPU. With --gpus-per-node (or
# --gres=gpu:N) every task sees all the node's GPUs; then task SLURM_LOCALID takes GPU
# SLURM_LOCALID (mod their number), so that no two ranks on a node share one by accident.
if [[ -n ${CUDA_VISIBLE_DEVICES:-} && ${CUDA_VISIBLE_DEVICES} != NoDevFiles ]]; then
  IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"
  if (( ${#gpus[@]} > 1 )); then
    export CUDA_VISIBLE_DEVICES=${gpus[$(( ${SLURM_LOCALID:-0} % ${#gpus[@]} ))]}
  fi
fi
exec "$@"
