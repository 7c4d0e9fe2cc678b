"""For the GPU tests of the Hopper kernels: whether this machine has a Hopper GPU (sm_90a)."""
import tvm


def hopper_gpu() -> bool:
    device = tvm.cuda(0)
    return device.exist and device.compute_version == "9.0"
