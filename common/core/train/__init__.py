"""The training drive: the shared main, the epoch loop, the trainer base, progress, the
learning-rate schedule, the framework table."""
