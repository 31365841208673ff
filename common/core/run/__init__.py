"""A run's life and faults: its folder, identity, beacons, checkpoints, resume, stop signals, the
run_end of every way out, the trainer contract."""
