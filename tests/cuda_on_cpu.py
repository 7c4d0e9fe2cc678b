"""Run a build's CUDA kernels on the CPU, for the tests of a machine without a GPU.

The generated CUDA source is compiled as host code by nvcc's host compiler with the toolkit's
headers (``half`` converts on the host too):
each block runs on its own, its threads as CPU threads, ``__syncthreads()`` a barrier of the block,
and a warp shuffle a store to a slot per thread, a barrier and a load of the partner's slot (successive
shuffles alternate between two sets of slots). A shuffle must therefore be reached by every thread of
the block at once: true of the kernels here, whose shuffles no thread skips (TVM's cross-thread
reductions, the attention kernel's row reductions). Slow (one OS thread per CUDA thread) and for small
shapes only; what it checks is the kernel's indexing, barriers and arithmetic, not its speed or
anything of the GPU's memory model beyond barriers.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from explorer.cuda_compile import nvcc_path
from explorer.workloads import numpy_dtype

PRELUDE = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
struct EmuDim { int x = 0, y = 0, z = 0; };
static thread_local EmuDim emu_threadIdx, emu_blockIdx;
static int EMU_BX, EMU_BY;  // the launched kernel's block shape
static int emu_flat() { return emu_threadIdx.x + emu_threadIdx.y * EMU_BX + emu_threadIdx.z * EMU_BX * EMU_BY; }
// RUNTIME's, compiled apart (_runtime_object)
void emu_sync();
void emu_launch(int grid_x, int grid_y, int grid_z, int threads, void (*thread_main)(int bx, int by, int bz, int t));
// The warp-wide instructions below: every thread stores its operands, a barrier, each loads the others'. Successive
// ones of a kind store in alternate slots, so a thread stores into a slot again only after the next one's barrier,
// which every thread reaches once it has loaded from it: one barrier each, not two (each barrier switches between
// all of the block's threads).
static float emu_slots[2][1024];
static thread_local unsigned emu_exchanges, emu_ldmatrices, emu_mmas;
static float emu_exchange(float v, int lane_of_partner) {
  int t = emu_flat();
  float* slots = emu_slots[emu_exchanges++ & 1];
  slots[t] = v;
  emu_sync();
  return slots[(t & ~31) | lane_of_partner];
}
static float emu_shfl_xor(unsigned, float v, int mask, int width) {
  int lane = emu_flat() & 31;
  return emu_exchange(v, (lane & ~(width - 1)) | ((lane & (width - 1)) ^ mask));
}
static float emu_shfl_down(unsigned, float v, int delta, int width) {
  int lane = emu_flat() & 31;
  int src = (lane & (width - 1)) + delta < width ? lane + delta : lane;
  return emu_exchange(v, src);
}
// ldmatrix.x4 and mma.sync.m16n8k16 (f16 in, f32 accumulate), warp-wide: every lane publishes its
// operands, a barrier, each computes its own registers from the others', a barrier (PTX ISA's
// fragment layouts: lane = 4 * group + thread-in-group).
static const void* emu_row_slots[2][1024];
static float emu_a_slots[2][1024][8], emu_b_slots[2][1024][4];
template <typename H> static void emu_ldmatrix_x4(const H* row, void* dst, bool trans) {
  int t = emu_flat(), base = t & ~31, lane = t & 31;
  const void** emu_rows = emu_row_slots[emu_ldmatrices++ & 1];
  emu_rows[t] = row;
  emu_sync();
  for (int i = 0; i < 4; ++i)
    for (int e = 0; e < 2; ++e)
      ((H*)dst)[i * 2 + e] = trans ? ((const H*)emu_rows[base + i * 8 + lane % 4 * 2 + e])[lane / 4]
                                   : ((const H*)emu_rows[base + i * 8 + lane / 4])[lane % 4 * 2 + e];
}
template <typename H> static void emu_mma_m16n8k16(const H* a, const H* b, float* c) {
  int t = emu_flat(), base = t & ~31, lane = t & 31;
  float (*emu_a)[8] = emu_a_slots[emu_mmas & 1];
  float (*emu_b)[4] = emu_b_slots[emu_mmas++ & 1];
  for (int j = 0; j < 8; ++j) emu_a[t][j] = static_cast<float>(a[j]);
  for (int j = 0; j < 4; ++j) emu_b[t][j] = static_cast<float>(b[j]);
  emu_sync();
  for (int j = 0; j < 4; ++j) {
    int row = lane / 4 + j / 2 * 8, col = lane % 4 * 2 + j % 2;
    float sum = c[j];
    for (int k = 0; k < 16; ++k)
      sum += emu_a[base + row % 8 * 4 + k % 8 / 2][k / 8 * 4 + row / 8 * 2 + k % 2]
           * emu_b[base + col * 4 + k % 8 / 2][k / 8 * 2 + k % 2];
    c[j] = sum;
  }
}
// The generated helper that turns a pointer into a shared-memory address stays defined, but the
// emulation rewrites every instruction that takes one to use the pointer itself.
static unsigned __cvta_generic_to_shared(const void*) { std::abort(); }
template <typename T> static T emu_max(T a, T b) { return a > b ? a : b; }
template <typename T> static T emu_min(T a, T b) { return a < b ? a : b; }
"""


# The threads of each block and their barrier, compiled once (_runtime_object) and linked into every emulation:
# instantiating std::thread, std::barrier and their lambdas was 0.1 s of each emulation's compile.
RUNTIME = r"""
#include <barrier>
#include <thread>
#include <vector>
static std::barrier<>* emu_barrier;
void emu_sync() { emu_barrier->arrive_and_wait(); }
// Each thread of the block an OS thread, running thread_main(block index, thread index) for one block after
// another: a barrier after each, as the blocks share the static arrays that stand for shared memory (and a
// thread started once per launch, not once per block: a barrier costs less than starting 128 threads).
void emu_launch(int grid_x, int grid_y, int grid_z, int threads, void (*thread_main)(int bx, int by, int bz, int t)) {
  std::barrier<> block(threads);
  emu_barrier = &block;
  std::vector<std::thread> running;
  running.reserve(threads);
  for (int t = 0; t < threads; ++t)
    running.emplace_back([=] {
      for (int bz = 0; bz < grid_z; ++bz) for (int by = 0; by < grid_y; ++by) for (int bx = 0; bx < grid_x; ++bx) {
        thread_main(bx, by, bz, t);
        emu_sync();
      }
    });
  for (auto& thread : running) thread.join();
}
"""


LDMATRIX = re.compile(r"tvm_builtin_ptx_ldmatrix_sync_aligned_m8n8_x4(_trans)?_shared_b16\((\(\(uint\*\)\w+\)\[\d+\]), "
                      r".*?tvm_builtin_cuda_cvta_generic_to_shared\((.*?)\)\);(?=\s)")
MMA = re.compile(r'__asm__ __volatile__\(\s*"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32"\s*"[^"]*"\s*'
                 r':\s*"=f"\(\(\(float \*\)\(([^)]*)\)\)\[0\]\).*?: "r"\(\(\(unsigned \*\)\(([^)]*)\)\)\[0\]\)'
                 r'(?:, "r"\(\(\(unsigned \*\)\([^)]*\)\)\[[123]\]\)){3}'
                 r', "r"\(\(\(unsigned \*\)\(([^)]*)\)\)\[0\]\).*?\);',
                 re.S)

CP_ASYNC = re.compile(r"tvm_builtin_ptx_cp_async_c[ag]_\w*_16\("
                      r"tvm_builtin_cuda_cvta_generic_to_shared\((.*?)\), (.*?)\);(?=\s)")


@functools.cache
def host_compiler() -> list[str]:
    """The C++ compiler nvcc runs for host code, with the include folders it gives it (``nvcc --dryrun``
    names them). The emulated kernels are host code only: nvcc itself would also run its own front end
    and its device passes on a file with no kernel left, 2.9 s of each emulation against 0.8 s here."""
    dryrun = subprocess.run([nvcc_path(), "--dryrun", "-x", "cu", "-E", "/dev/null"], capture_output=True,
                            text=True, check=True)
    flags = [flag for value in re.findall(r"^#\$ (?:SYSTEM_)?INCLUDES=(.*)$", dryrun.stderr, re.M)
             for flag in shlex.split(value)]
    return [shutil.which("g++") or "c++", *flags]


# The headers of every emulation (PRELUDE's, hopper_on_cpu's and those of TVM's generated CUDA), compiled once
# (_precompiled_headers): parsing them was 0.4-0.6 s of each 0.6-1.1 s compile. Including them again in a source
# changes nothing (their include guards), so a header missing here is only parsed where it is included.
HEADERS = ("array", "barrier", "cmath", "condition_variable", "cstdint", "cstdio", "cstdlib", "cstring", "map", "mutex",
           "thread", "type_traits", "vector", "cuda.h", "cuda_fp16.h", "cuda/std/cstdint", "cuda/std/type_traits")
FLAGS = ("-std=c++20", "-O1", "-w", "-pthread")  # an emulation's, and its precompiled headers' (they must agree)


@functools.cache
def _compiler_stamp() -> str:
    """The host compiler's file (its time and size): a compiler installed since changes what it makes."""
    made = os.stat(os.path.realpath(host_compiler()[0]))
    return f"{made.st_mtime_ns}:{made.st_size}"


def _made_once(kind: str, source_name: str, text: str, made_name: str, options: list[str]) -> Path:
    """``text`` written to ``source_name`` and compiled with FLAGS and ``options`` into ``made_name`` beside it,
    once for every test process and run: in the temporary folder, under the hash of what makes it, and built
    under a lock by the first process that needs it. The path of the source."""
    command = [*host_compiler(), *FLAGS, *options]
    made_of = hashlib.sha256("\0".join([text, *command, _compiler_stamp()]).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"explorer-emulation-{kind}-{made_of}"
    folder.mkdir(exist_ok=True)
    source, made = folder / source_name, folder / made_name
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            source.write_text(text)
            partial = folder / f"{made_name}.{os.getpid()}"
            compiled = subprocess.run([*command, str(source), "-o", str(partial)],
                                      capture_output=True, text=True, timeout=300)
            if compiled.returncode:
                raise RuntimeError(compiled.stderr[-3000:])
            partial.rename(made)
    return source


@functools.cache
def _precompiled_headers() -> str:
    """A header including HEADERS, compiled beside it (g++ reads ``headers.h.gch`` for ``-include headers.h``)."""
    text = "".join(f"#include <{header}>\n" for header in HEADERS)
    return str(_made_once("headers", "headers.h", text, "headers.h.gch", ["-x", "c++-header"]))


@functools.cache
def _runtime_object() -> str:
    """RUNTIME compiled to an object file, which run_on_cpu's programs link."""
    source = _made_once("runtime", "runtime.cc", RUNTIME, "runtime.o", ["-include", _precompiled_headers(), "-c"])
    return str(source.with_suffix(".o"))


@contextlib.contextmanager
def _one_core():
    """A core for an emulation's threads: on several, a thread waiting at a barrier spins and yields while
    the others run elsewhere, a third more CPU time in all than taking turns on one core. The core is one
    that no other test process's emulation holds (a lock per core, held while it runs), so that two
    emulations at once run on two cores, not one; with every core held, one chosen by this process's id."""
    cores = sorted(os.sched_getaffinity(0))
    mine = os.getpid() % len(cores)
    for core in cores[mine:] + cores[:mine]:
        with open(os.path.join(tempfile.gettempdir(), f"explorer-emulation-core-{core}.lock"), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            yield core
            return
    yield cores[mine]


def _compiled(source: str, objects: tuple[str, ...] = ()) -> Path:
    """The program compiled from ``source`` and linked with ``objects``, kept in the temporary folder under the
    hash of the source and of the compile: a source emulated before (the same setting in another test, or in an
    earlier run) is not compiled again (0.2-0.8 s of g++ each). Written whole: a program is renamed into place
    once compiled."""
    command = [*host_compiler(), *FLAGS, "-include", _precompiled_headers()]
    key = hashlib.sha256("\0".join([*command, *objects, _compiler_stamp(), source]).encode()).hexdigest()[:32]
    program = Path(tempfile.gettempdir()) / "explorer-emulations" / key
    if program.exists():
        return program
    program.parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="explorer-cpu-cuda-") as tmp:
        (Path(tmp) / "kernel.cu").write_text(source)
        compiled = subprocess.run([*command, "-o", f"{tmp}/kernel", "-x", "c++", f"{tmp}/kernel.cu", "-x", "none",
                                   *objects],
                                  capture_output=True, text=True, timeout=300)
        if compiled.returncode:
            raise RuntimeError(compiled.stderr[-3000:])
        os.replace(f"{tmp}/kernel", program)
    return program


def compile_and_run(source: str, inputs: list[np.ndarray], output_dtype, timeout_s: int,
                    objects: tuple[str, ...] = (), arguments: tuple[str, ...] = ()) -> np.ndarray:
    """``source`` (a program whose arguments are ``arguments``, the files of ``inputs``, then the file its
    output is written to) compiled as host code, linked with ``objects``, and run: the output, flat."""
    program = _compiled(source, objects)
    with tempfile.TemporaryDirectory(prefix="explorer-cpu-cuda-") as tmp:
        tmp = Path(tmp)
        paths = []
        for number, array in enumerate(inputs):
            path = tmp / f"input{number}.bin"
            np.ascontiguousarray(array).tofile(path)
            paths.append(str(path))
        result = tmp / "out.bin"
        with _one_core() as core:
            ran = subprocess.run([str(program), *arguments, *paths, str(result)], capture_output=True, text=True,
                                 timeout=timeout_s, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
        if ran.returncode:
            raise RuntimeError(ran.stderr[-3000:])
        return np.fromfile(result, output_dtype)


def _host_source(cuda: str) -> str:
    body = LDMATRIX.sub(lambda m: f"emu_ldmatrix_x4({m.group(3)}, &{m.group(2)}, {'true' if m.group(1) else 'false'});",
                        cuda)
    body = CP_ASYNC.sub(r"memcpy(\1, \2, 16);", body)  # the copy done at once: the waits have nothing to wait for
    body = re.sub(r"tvm_builtin_ptx_cp_async_(commit|wait)_group\w*\(\);", "", body)
    body = MMA.sub(lambda m: f"emu_mma_m16n8k16(({m.group(2)}), ({m.group(3)}), ({m.group(1)}));", body)
    # Shared arrays keep their alignment: vector loads (float4, half4) need it on the host too.
    dynamic_shared = r"extern __shared__ (__align__\(\d+\) )?(\w+) (\w+)\[\];"
    for pattern, replacement in ((dynamic_shared, r"static \1\2 \3[1 << 17];"),
                                 (r'extern "C" __global__ void __launch_bounds__\(\d+\)', "void"),
                                 (r'extern "C" __global__ void', "void"),
                                 (r"__shared__ alignas\((\d+)\)", r"static __align__(\1)"), (r"__shared__", "static"),
                                 (r"\bthreadIdx\b", "emu_threadIdx"), (r"\bblockIdx\b", "emu_blockIdx"),
                                 (r"__syncthreads\(\)", "emu_sync()"),
                                 (r"__shfl_xor_sync", "emu_shfl_xor"), (r"__shfl_down_sync", "emu_shfl_down"),
                                 (r"__activemask\(\)", "0xffffffffu"),
                                 (r"(?<![\w.])max\(", "emu_max("), (r"(?<![\w.])min\(", "emu_min(")):
        body = re.sub(pattern, replacement, body)
    return body


def _arrays(built, inputs: list[np.ndarray] | None, scratch: dict) -> dict[str, np.ndarray]:
    """The global buffers of ``built``'s kernels: its workload's inputs (``inputs``, or empty ones of their
    shapes), its output and ``scratch``, the output and scratch NaN."""
    workload = built.spec.workload
    if inputs is None:
        inputs = [np.empty(shape, numpy_dtype(dtype))
                  for shape, dtype in zip(workload.input_shapes(), workload.input_dtypes(), strict=True)]
    arrays = dict(zip(workload.input_names, inputs, strict=True))
    arrays[workload.output_name] = np.full(workload.output_shape(), np.nan, numpy_dtype(workload.output_dtype()))
    return arrays | {name: np.full(shape, np.nan, dtype) for name, (shape, dtype) in scratch.items()}


def _setting(built, arrays: dict[str, np.ndarray]) -> str:
    """``built``'s kernels as host code, with ``int run(char** files)``: the buffers read from the files of
    ``arrays`` but the last (the output, written to the last file), each kernel launched in order."""
    names = list(arrays)
    ctypes = {name: {"float16": "half", "float32": "float"}[str(array.dtype)] for name, array in arrays.items()}
    program = [f"static {ctypes[name]}* {name}_buf;" for name in names]
    run = ["int run(char** files) {"]
    for i, name in enumerate(names):
        size, ctype = arrays[name].size, ctypes[name]
        run.append(f"  {name}_buf = ({ctype}*)malloc(sizeof({ctype}) * {size});")
        run.append(f"  {{ FILE* f = fopen(files[{i}], \"rb\"); fread({name}_buf, sizeof({ctype}), {size}, f); "
                   f"fclose(f); }}")
    for number, kernel in enumerate(built.kernels):
        signature = re.search(rf"void {kernel.name}\(([^)]*)\)", _host_source(built.cuda)).group(1)
        arguments = ", ".join(f"{m}_buf" for m in re.findall(r"(\w+)_ptr\b", signature))
        x, y = kernel.block[:2]
        program.append(f"static void emu_thread_{number}(int bx, int by, int bz, int t) {{ "
                       f"emu_blockIdx = EmuDim{{bx, by, bz}}; emu_threadIdx = EmuDim{{t % {x}, t / {x} % {y}, "
                       f"t / ({x} * {y})}}; {kernel.name}({arguments}); }}")
        run.append(f"  EMU_BX = {x}; EMU_BY = {y};")
        grid = ", ".join(map(str, kernel.grid))
        run.append(f"  emu_launch({grid}, {kernel.threads_per_block}, emu_thread_{number});")
    out = built.spec.workload.output_name
    run.append(f"  {{ FILE* f = fopen(files[{len(names)}], \"wb\"); fwrite({out}_buf, sizeof({ctypes[out]}), "
               f"{arrays[out].size}, f); fclose(f); }}")
    run.append("  return 0;\n}")
    return _host_source(built.cuda) + "\n" + "\n".join(program + run)


def run_on_cpu(built, inputs: list[np.ndarray], scratch: dict[str, tuple[tuple[int, ...], str]],
               together: list | None = None) -> np.ndarray:
    """The output of ``built``'s kernels, launched in order on ``inputs`` (the workload's), with
    ``scratch`` naming the global buffers that TVM's host code allocates between them (name:
    (shape, dtype)). ``together``: the (build, scratch) of every setting of a test file, ``built`` among
    them, compiled into one program (each setting's code in a namespace of its own, their headers included
    once before) that runs the one it is asked for: the file's settings compile once (a compile's start,
    headers and link are 0.13 CPU-s of each), and its later runs find the program kept."""
    settings = together if together is not None else [(built, scratch)]
    (which,) = [number for number, (setting, _) in enumerate(settings) if setting is built]
    parts, includes = [], {}
    for number, (setting, its_scratch) in enumerate(settings):
        code = _setting(setting, _arrays(setting, inputs if setting is built else None, its_scratch))
        lines = code.splitlines()
        includes |= dict.fromkeys(line.strip() for line in lines if line.strip().startswith("#include"))
        body = "\n".join(line for line in lines if not line.strip().startswith("#include"))
        parts.append(f"namespace emu_setting_{number} {{\n{body}\n}}")
    cases = " ".join(f"case {number}: return emu_setting_{number}::run(argv + 2);" for number in range(len(settings)))
    main = f"int main(int argc, char** argv) {{ switch (atoi(argv[1])) {{ {cases} }} return 2; }}"
    arrays = _arrays(built, inputs, scratch)
    out = built.spec.workload.output_name
    output = compile_and_run("\n".join([PRELUDE, *includes, *parts, main]), list(arrays.values()), arrays[out].dtype,
                             timeout_s=600, objects=(_runtime_object(),), arguments=(str(which),))
    return output.reshape(built.spec.workload.output_shape()).astype("float32")
