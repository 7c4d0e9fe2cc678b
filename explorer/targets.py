"""Choosing the CUDA target: the local GPU when there is one, else an H100."""
from __future__ import annotations

import functools
import re

import tvm

from .errors import ExplorerError

DEFAULT_TAG = "nvidia/nvidia-h100"
WARP_SIZE = 32  # threads per warp on every NVIDIA GPU
# Shared memory: 32 banks of 4-byte words, a request served 128 bytes per wavefront (every GPU the
# explorer builds for, sm_70 and later).
BANKS = 32
BANK_BYTES = 4
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in a shuffle
# Short names a user can type; any TVM target tag or "sm_XY" works too.
ALIASES = {
    "h100": "nvidia/nvidia-h100",
    "a100": "nvidia/nvidia-a100",
    "t4": "nvidia/nvidia-t4",  # TVM 0.27 has no nvidia/tesla-t4
    "rtx4090": "nvidia/geforce-rtx-4090",
}
# GPUs that TVM has no tag of: another GPU's tag (the same architecture and limits) with the GPU's
# name as the target's "model", which the published figures are looked up by (explorer/gpus.py).
MODELS = {
    "h100-pcie": ("nvidia/nvidia-h100", "H100 PCIe"),
    "h200": ("nvidia/nvidia-h100", "H200"),
}
NAMES = (*ALIASES, *MODELS)  # every short name, as the Device page offers them


@functools.cache
def local_gpu_target() -> tvm.target.Target | None:
    """This machine's GPU as a target, named as the driver names it ("model": "NVIDIA H200")."""
    device = tvm.cuda(0)
    if not device.exist:
        return None
    return with_model(tvm.target.Target.from_device(device), device.device_name)


def with_model(target: tvm.target.Target, model: str) -> tvm.target.Target:
    return tvm.target.Target({**target.export(), "model": model})


def gpu_name(target: tvm.target.Target) -> str | None:
    """The GPU ``target`` names (its "model"), or None: the published figures are then its architecture's."""
    model = target.attrs.get("model")
    return str(model) if model else None


@functools.lru_cache(maxsize=64)
def resolve_target(name: str | None = None) -> tvm.target.Target:
    """``None``/"auto": local GPU or H100. Else an alias, a TVM tag, "sm_XY" or "llvm"."""
    if name in (None, "", "auto"):
        return local_gpu_target() or tvm.target.Target(DEFAULT_TAG)
    if name.lower() in MODELS:
        tag, model = MODELS[name.lower()]
        return with_model(tvm.target.Target(tag), model)
    text = ALIASES.get(name.lower(), name)
    if re.fullmatch(r"sm_\d+a?", text):
        return tvm.target.Target({"kind": "cuda", "arch": text})
    try:
        return tvm.target.Target(text)
    except Exception:  # TVM raises ValueError or its own errors for unknown strings
        raise ExplorerError(
            f"Unknown target '{name}'; use 'auto', a GPU name ({', '.join(NAMES)}), a TVM tag such as "
            f"'{DEFAULT_TAG}', or an architecture such as 'sm_90a'."
        ) from None


def target_label(target: tvm.target.Target) -> str:
    if target.kind.name == "cuda":
        return f"CUDA {target.arch}"
    return target.kind.name


def is_cuda(target: tvm.target.Target) -> bool:
    return target.kind.name == "cuda"
