"""Compiling CUDA at load time on a machine with an NVIDIA driver but no CUDA toolkit.

TVM compiles CUDA source with NVRTC (``tvm_callback_cuda_compile``, through the
``cuda-bindings`` package). Without a toolkit, requirements.txt installs the pieces from
pip under ``site-packages/nvidia/cu13``: NVRTC (``nvidia-cuda-nvrtc``), the CUDA runtime
library that TVM's CUDA runtime links to and ``cuda_runtime.h`` (``nvidia-cuda-runtime``),
and libcu++ headers that the generated source includes under NVRTC (``nvidia-cuda-cccl``).
Three things then have to point there, in the environment of the process that runs the
kernels (set before it starts: the dynamic loader reads ``LD_LIBRARY_PATH`` once):

- ``LD_LIBRARY_PATH``: ``libcudart.so.13`` for TVM's CUDA runtime and
  ``libnvrtc-builtins.so`` that NVRTC opens at compile time;
- ``CUDA_PATH``: TVM looks for ``include/cuda_runtime.h`` there;
- ``TVM_CUDA_NVRTC_EXTRA_OPTS``: TVM adds ``include/cccl`` only for a toolkit layout,
  so the pip layout's ``include/cccl`` is passed as an extra ``-I``.

A machine with a toolkit (``nvcc`` on PATH or ``CUDA_PATH`` set) is left alone.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
from pathlib import Path
from typing import Mapping

PIP_CUDA = "cu13"  # the CUDA major version of the pinned nvidia-* wheels


def pip_cuda_root() -> Path | None:
    """``site-packages/nvidia/cu13`` when the pip NVRTC, runtime and headers are there."""
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        root = Path(location) / PIP_CUDA
        if (root / "include" / "cuda_runtime.h").is_file() and any((root / "lib").glob("libnvrtc.so*")):
            return root
    return None


def kernel_environment(environ: Mapping[str, str] | None = None, root: Path | None = None,
                       nvcc: str | None = None) -> dict[str, str]:
    """The variables to add for a process that compiles and runs CUDA kernels; empty when
    a CUDA toolkit is installed or the pip packages are absent. Arguments default to this
    machine's (they are parameters so that tests can describe another machine)."""
    environ = os.environ if environ is None else environ
    root = pip_cuda_root() if root is None else root
    nvcc = shutil.which("nvcc") if nvcc is None else nvcc
    if root is None or nvcc or environ.get("CUDA_PATH"):
        return {}
    library_path = [p for p in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    extra = environ.get("TVM_CUDA_NVRTC_EXTRA_OPTS", "")
    return {
        "LD_LIBRARY_PATH": os.pathsep.join([*library_path, str(root / "lib")]),
        "CUDA_PATH": str(root),
        "TVM_CUDA_NVRTC_EXTRA_OPTS": f"{extra} -I{shlex.quote(str(root / 'include' / 'cccl'))}".strip(),
    }
