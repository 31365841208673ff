"""The PyTorch side: single, DDP, FSDP2, FSDP1 and HSDP training on the shared `common` spine."""

import os

# torch's CPU matmuls run on Intel MKL; a busy machine must not change its thread count
# (MKL_DYNAMIC). torch.set_num_threads also turns it off, for the programs that call it; this
# covers the rest. Set before torch is imported; a user's own value wins. (Runs that now and then
# ended a few units of 1e-7 apart had another cause: `torch_impl.precision.settle_vector_math`.)
os.environ.setdefault("MKL_DYNAMIC", "FALSE")
