"""What a run measures: clocks, memory, the GEMM peak, devices and threads, precision and replica
agreement, the few collectives they need."""
