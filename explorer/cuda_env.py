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

A machine with a toolkit (``nvcc`` on PATH or ``CUDA_PATH`` set) keeps its own paths. On
every machine with NVRTC 12.8+, the compile options also get the precompiled headers below.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import site
from collections.abc import Mapping
from pathlib import Path

# Set in a process that must only generate CUDA source: TVM's codegen then makes the
# source-only module it makes on a machine without a GPU, and never runs NVRTC.
SOURCE_ONLY = "TVM_COMPILE_FORCE_FALLBACK"
PIP_CUDA = "cu13"  # the CUDA major version of the pinned nvidia-* wheels
# TVM's generated source includes libcu++'s <cuda/std/type_traits>, whose parsing is ~75% of
# an NVRTC compile (0.8 of 1.1 s on the CPU machine). Pre-included, the headers open the
# translation unit, so NVRTC's automatic precompiled header (-pch, NVRTC 12.8+) keeps them
# parsed for the next compile in the same process, the long-lived measuring worker: a knob
# change then compiles in ~0.15 s. The kernel code is identical (tested).
PCH_OPTIONS = ["-pch", "--pre-include=cuda/std/cstdint", "--pre-include=cuda/std/type_traits",
               "--pre-include=cuda/std/limits"]
PCH_SINCE = (12, 8)


def pip_cuda_root() -> Path | None:
    """``site-packages/nvidia/cu13`` when the pip NVRTC, runtime and headers are there,
    libcu++'s too (PyTorch's wheels bring NVRTC and the runtime without them)."""
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if is_pip_cuda_root(Path(location) / PIP_CUDA):
            return Path(location) / PIP_CUDA
    return None


def is_pip_cuda_root(root: Path) -> bool:
    return ((root / "include" / "cuda_runtime.h").is_file() and any((root / "lib").glob("libnvrtc.so*"))
            and (root / "include" / "cccl" / "cuda" / "std" / "cstdint").is_file())


def nvrtc_version() -> tuple[int, int] | None:
    """The NVRTC that cuda-bindings loads, or None without one."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # no cuda-bindings, or no libnvrtc to load
        return None
    return (major, minor)


DETECT = object()  # a kernel_environment argument left to this machine


def binary_process_init(root: str) -> None:
    """Initializer of a process that compiles kernels to binaries and may launch them
    (the measuring worker, MetaSchedule's builders): it finds the explorer at ``root`` and
    undoes SOURCE_ONLY, which it inherits from the app's process."""
    site.addsitedir(root)
    os.environ.pop(SOURCE_ONLY, None)


def without_source_only(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a child process that must compile and launch kernels."""
    return {key: value for key, value in environ.items() if key != SOURCE_ONLY}


def kernel_environment(environ: Mapping[str, str] | None = None, root=DETECT, nvcc=DETECT,
                       nvrtc=DETECT) -> dict[str, str]:
    """The variables to set for a process that compiles and runs CUDA kernels (only what
    is missing: calling it again adds nothing). Each argument defaults to this machine's
    (``root``: the pip CUDA directory, ``nvcc``: its path, ``nvrtc``: its version); tests
    describe other machines with them."""
    environ = os.environ if environ is None else environ
    root = pip_cuda_root() if root is DETECT else root
    nvcc = shutil.which("nvcc") if nvcc is DETECT else nvcc
    nvrtc = nvrtc_version() if nvrtc is DETECT else nvrtc
    changes = {}
    options = shlex.split(environ.get("TVM_CUDA_NVRTC_EXTRA_OPTS", ""))
    wanted = []
    if root is not None and not nvcc and not environ.get("CUDA_PATH"):
        library_path = [p for p in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        if str(root / "lib") not in library_path:
            changes["LD_LIBRARY_PATH"] = os.pathsep.join([*library_path, str(root / "lib")])
        changes["CUDA_PATH"] = str(root)
        wanted.append(f"-I{root / 'include' / 'cccl'}")
    if nvrtc is not None and nvrtc >= PCH_SINCE:
        wanted += PCH_OPTIONS
    if any(option not in options for option in wanted):
        # The wanted options in one order, however many calls added them: the disk cache keys a binary by
        # this variable, so processes that came by it differently must still spell it alike.
        changes["TVM_CUDA_NVRTC_EXTRA_OPTS"] = shlex.join([*(o for o in options if o not in wanted), *wanted])
    return changes
