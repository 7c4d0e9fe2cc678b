"""The compile stage: CUDA source -> cubin -> registers, shared memory and SASS.

Below both :mod:`explorer.build` (whose code generation compiles each kernel through TVM's
``tvm_callback_cuda_compile``, here the cubin with line info, kept on disk) and
:mod:`explorer.analysis` (the SASS and resources views and the diagnosis read the same cubin). Every process that
builds (the app, the build and compile pools, the measuring worker) compiles through it.

No CUDA toolkit is needed. NVRTC (pip ``nvidia-cuda-nvrtc``, through TVM's own NVRTC path
``tvm.support.nvcc.compile_cuda``) compiles the generated CUDA to a cubin for the target
architecture; ``nvdisasm -g`` (pip ``nvidia-cuda-nvdisasm``) prints its SASS with the source
line of each instruction, and ``cuobjdump --dump-resource-usage`` (pip ``nvidia-cuda-cuobjdump``)
reads the registers, shared and local memory of each kernel. A toolkit's tools are used where
the pip ones are missing, and ``nvcc -Xptxas -v`` where NVRTC or the pip disassembler is.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass

import tvm
from tvm.support import nvcc as tvm_nvcc

try:
    import fcntl
except ImportError:  # Windows: no lock between processes, each compiles what it needs
    fcntl = None

from .cuda_env import DETECT, kernel_environment, nvrtc_version, pip_cuda_root
from .errors import ExplorerError, summary_line

SOURCE_NAME = "kernel.cu"  # the file name the line info carries

# -- TVM's CUDA compile, once per machine ----------------------------------------------
# With a GPU, TVM compiles each kernel's CUDA source (NVRTC or nvcc, about a second) inside
# code generation, in every process that builds it: the app, the measuring worker, each
# sweep compile worker. The binaries are kept on disk by source, architecture and compiler
# settings, so the measuring worker's rebuild of a kernel a sweep worker (or the app) just
# compiled costs no second compile, and neither do the analyses' cubin of the same source.
CUDA_CACHE = os.environ.get("EXPLORER_CUDA_CACHE", os.path.join(tempfile.gettempdir(), "explorer-cuda-cache"))
_COMPILE_SETTINGS = ("TVM_CUDA_COMPILE_MODE", "TVM_CUDA_NVRTC_EXTRA_OPTS", "TVM_CUDA_PTXAS_REG_LEVEL",
                     "TVM_CUDA_PTXAS_EXTRA_OPTS", "CUDA_PATH")


# This process's binaries by where they came from: "compiled" here, "read" from the disk, or
# "waited" for while another process compiled them (the compile log counts them per setting).
CUBINS: collections.Counter = collections.Counter()


def cached_cuda_compile(compile_cuda, cache_dir: str = CUDA_CACHE):
    """Wrap TVM's ``tvm_callback_cuda_compile`` with a disk cache (dumps bypass it)."""

    def compile_cached(code, *rest):
        if os.environ.get("TVM_KERNEL_DUMP"):
            return compile_cuda(code, *rest)
        target = tvm.target.Target.current(allow_none=True)
        arch = str(target.attrs.get("arch", "")) if target is not None else tvm.cuda(0).compute_version
        settings = [os.environ.get(name, "") for name in _COMPILE_SETTINGS]
        key = hashlib.sha256("\0".join([tvm.__version__, arch, *settings, str(code)]).encode()).hexdigest()
        path = os.path.join(cache_dir, key + ".bin")
        kept = _read(path)
        if kept is not None:
            CUBINS["read"] += 1
            return kept
        # One process compiles a source at a time: the others wait for its binary (a class
        # server's compile and diagnosing processes often reach the same new setting at once).
        os.makedirs(os.path.join(cache_dir, "locks"), exist_ok=True)
        with open(os.path.join(cache_dir, "locks", key), "wb") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            kept = _read(path)
            if kept is not None:
                CUBINS["waited"] += 1
                return kept
            CUBINS["compiled"] += 1
            binary = bytes(compile_cuda(code, *rest))
            _keep(path, binary)
        return binary

    return compile_cached


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _keep(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole: processes that write the same file at once each write
    their own and rename it into place."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False) as f:
        f.write(data)
    os.replace(f.name, path)


@functools.cache  # once per process: a second call would wrap the cache in itself
def install_disk_cache() -> None:
    """Put the disk cache in front of TVM's CUDA compile in this process (explorer.build does,
    when it is imported, so that every process that builds uses it)."""
    tvm_compile = cached_cuda_compile(tvm.get_global_func("tvm_callback_cuda_compile"))

    def compile_kernel(code, *rest):
        # NVRTC's cubin with line info is the one the SASS view, the resources and the
        # diagnosis read (compile_cubin): code generation takes that same cubin, so a setting
        # costs one NVRTC compile per machine, not one here and one for the analyses.
        # -lineinfo adds a line table and changes no instruction.
        if os.environ.get("TVM_KERNEL_DUMP") or os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc").lower() != "nvrtc":
            return tvm_compile(code, *rest)  # TVM's own files, or nvcc's fatbin
        # The build's target (explorer.build enters it), else the GPU's, as TVM's compile reads it.
        version = tvm_nvcc.get_target_compute_version(tvm.target.Target.current(allow_none=True))
        return compile_cubin(str(code), "sm_" + version.replace(".", ""))

    tvm.register_global_func("tvm_callback_cuda_compile", compile_kernel, override=True)


# -- the cubin, its SASS and resources (NVRTC, nvdisasm, cuobjdump) ----------------------


def tool_path(name: str) -> str | None:
    """``nvdisasm``/``cuobjdump`` from pip (``site-packages/nvidia/cu13/bin``), else a toolkit's."""
    root = pip_cuda_root()
    if root is not None and (root / "bin" / name).is_file():
        return str(root / "bin" / name)
    return shutil.which(name)


def missing_tools() -> str:
    """Why SASS cannot be made on this machine, or "" when it can."""
    missing = [name for name in ("nvdisasm", "cuobjdump") if tool_path(name) is None]
    if nvrtc_version() is None:
        missing.insert(0, "NVRTC")
    if not missing:
        return ""
    return f"The SASS view needs {', '.join(missing)}: pip install -r requirements.txt installs them."


_ENVIRONMENT_LOCK = threading.Lock()


@contextlib.contextmanager
def _nvrtc_environment():
    """TVM's NVRTC compile reads the CUDA root and the libcu++ include path from the
    environment (explorer/cuda_env.py); set what is missing, for this compile only.
    The pip headers go with the pip NVRTC, so they are preferred to a toolkit's (whose root
    TVM also guesses wrongly when ``nvcc`` on PATH is a wrapper script); a ``CUDA_PATH``
    already set is kept. LD_LIBRARY_PATH cannot change in a running process and is not
    needed: NVRTC finds its builtins library beside itself."""
    with _ENVIRONMENT_LOCK:
        changes = kernel_environment(nvcc=None if pip_cuda_root() is not None else DETECT)
        changes.pop("LD_LIBRARY_PATH", None)
        nvcc = shutil.which("nvcc")
        guessed = os.path.dirname(os.path.dirname(nvcc)) if nvcc else ""  # TVM's guess of the CUDA root
        if ("CUDA_PATH" not in os.environ and "CUDA_PATH" not in changes and nvcc
                and not os.path.isfile(os.path.join(guessed, "include", "cuda_runtime.h"))):
            changes["CUDA_PATH"] = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        saved = {k: os.environ.get(k) for k in changes}
        os.environ.update(changes)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _with_source_lines(cuda: str) -> str:
    """The source as NVRTC should see it for line info: TVM's NVRTC path puts a preamble
    before it and drops ``#include <cuda.h>`` lines, which would shift every line number; a
    ``#line`` directive first, and a ``#line`` in place of each dropped line, keep them."""
    lines = [f"#line {number + 1}" if line.strip() == "#include <cuda.h>" else line
             for number, line in enumerate(cuda.splitlines(), start=1)]
    return "\n".join([f'#line 1 "{SOURCE_NAME}"', *lines]) + "\n"


def compile_cubin(cuda: str, arch: str) -> bytes:
    """A cubin with line info for ``arch`` (e.g. ``sm_90``), compiled by NVRTC; on disk
    in the build cache, so the same source compiles once per machine."""
    def compile_nvrtc(code):
        return tvm_nvcc.compile_cuda(code, target_format="cubin", arch=arch, options=["-lineinfo"], compiler="nvrtc")

    compile_cached = cached_cuda_compile(compile_nvrtc, os.path.join(CUDA_CACHE, "lineinfo"))
    try:
        with _nvrtc_environment(), tvm.target.Target({"kind": "cuda", "arch": arch}):
            return compile_cached(_with_source_lines(cuda))
    except RuntimeError as error:  # TVM reports NVRTC's failures as RuntimeError
        # NVRTC's log names the failing line "... error: ..."; TVM's own message comes last.
        first = next((line.strip() for line in str(error).splitlines() if "error" in line), summary_line(error))
        raise ExplorerError(f"NVRTC could not compile the generated CUDA for {arch}: {first}") from None


def _run(tool: str, *args: str) -> str:
    proc = subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ExplorerError(f"{os.path.basename(tool)} failed on the cubin: {proc.stderr.strip()[:200]}")
    return proc.stdout


def disassemble(cubin: bytes) -> tuple[str, str]:
    """(``nvdisasm -g`` SASS with line info, ``cuobjdump --dump-resource-usage``) of a cubin, kept
    on disk beside the cubins by the cubin and the tools (a third of a second for nvdisasm to
    start, whatever the kernel; the server's processes and its next start read it back)."""
    tools = (tool_path("nvdisasm"), tool_path("cuobjdump"))
    key = hashlib.sha256(b"\0".join([cubin, *(tool.encode() for tool in tools)])).hexdigest()

    def run_tools() -> tuple[str, str]:
        with tempfile.TemporaryDirectory(prefix="explorer-sass-") as tmp:
            path = os.path.join(tmp, "kernel.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            return _run(tools[0], "-g", "-c", path), _run(tools[1], "--dump-resource-usage", path)

    return _kept_texts(os.path.join(CUDA_CACHE, "sass", key + ".json"), run_tools)


def _kept_texts(path: str, make) -> tuple[str, str]:
    """The two texts kept at ``path`` (JSON), else ``make()``'s, kept there for the next process."""
    text = _read(path)
    if text is not None:
        first, second = json.loads(text)
        return first, second
    first, second = make()
    _keep(path, json.dumps([first, second]).encode())
    return first, second


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """Kernel name -> {"REG": .., "SHARED": .., "LOCAL": .., "STACK": .., ...} from
    ``cuobjdump --dump-resource-usage``."""
    usage = {}
    for name, fields in re.findall(r"Function (\S+):\s*\n\s*(.*)", text):
        usage[name] = {key: int(value) for key, value in re.findall(r"(\w+(?:\[\d+\])?):(\d+)", fields)}
    return usage


# -- registers, shared memory and spills per kernel; nvcc where NVRTC cannot -----------


@dataclass(frozen=True)
class Binary:
    """What the compiled binary says about each kernel of the CUDA source."""

    tool: str  # "nvrtc" (the cubin, read by cuobjdump and nvdisasm) or "nvcc" (ptxas -v)
    arch: str
    registers: dict  # kernel name -> registers per thread
    shared_bytes: dict  # kernel name -> static shared bytes (a cubin's for sm_90 include the 1 KB reserved)
    spill_bytes: dict  # kernel name -> spill stores + loads in bytes
    log: str
    sass: str


def nvcc_path() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None
    )


@functools.lru_cache(maxsize=64)
def nvcc_binary(source: str, arch: str) -> Binary:
    """Registers, shared memory, spills and SASS of each kernel from ``nvcc -Xptxas -v`` (a toolkit's)."""
    log, sass = _nvcc_log_and_sass(nvcc_path(), source, arch)
    registers, shared, spills = {}, {}, {}
    current = None
    for line in log.splitlines():
        entry = re.search(r"Compiling entry function '(\w+)'", line)
        if entry:
            current = entry.group(1)
            continue
        if current is None:
            continue
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if spill:
            spills[current] = int(spill.group(1)) + int(spill.group(2))
        used = re.search(r"Used (\d+) registers", line)
        if used:
            registers[current] = int(used.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            shared[current] = int(smem.group(1)) if smem else 0
    return Binary("nvcc", arch, registers, shared, spills, log, sass)


def _nvcc_log_and_sass(nvcc: str, source: str, arch: str) -> tuple[str, str]:
    """``nvcc -Xptxas -v``'s log and the cubin's SASS, kept on disk beside the cubins by the source, the
    architecture and the nvcc (its path and its file's time and size): a second or more of nvcc per kernel,
    which the server's processes and its next start read back, as they do the NVRTC cubins."""
    made = os.stat(nvcc)
    key = hashlib.sha256("\0".join([nvcc, str(made.st_mtime_ns), str(made.st_size), arch, source]).encode())

    def compile_and_disassemble() -> tuple[str, str]:
        with tempfile.TemporaryDirectory(prefix="explorer-nvcc-") as tmp:
            src = os.path.join(tmp, "kernel.cu")
            cubin = os.path.join(tmp, "kernel.cubin")
            with open(src, "w") as f:
                f.write(source)
            proc = subprocess.run(
                [nvcc, "--cubin", f"-arch={arch}", "-O3", "-Xptxas", "-v", "-o", cubin, src],
                capture_output=True, text=True, timeout=120,
            )
            if proc.returncode != 0:
                raise ExplorerError(f"nvcc could not compile the generated CUDA: {summary_line(proc.stderr)}")
            sass = ""
            cuobjdump = shutil.which("cuobjdump", path=os.path.dirname(nvcc))
            if cuobjdump:
                dump = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, timeout=60)
                sass = dump.stdout
            return proc.stderr, sass

    return _kept_texts(os.path.join(CUDA_CACHE, "nvcc", key.hexdigest() + ".json"), compile_and_disassemble)
