"""Run a Hopper TIRx kernel's CUDA (TMA, mbarriers, wgmma) on the CPU, for the tests of a machine
without a GPU: the companion of tests/cuda_on_cpu.py for the sm_90a instructions.

The generated source is compiled as host code by nvcc. TVM writes each PTX instruction as a helper
function; every helper is replaced by an emulation of the instruction as the PTX ISA defines it:

- ``cp.async.bulk.tensor.2d`` copies the box at once, zero-filling what lies outside the tensor,
  writing it through the 128-byte swizzle (bits 4-6 of the shared address XOR bits 7-9), and
  completes its bytes on the mbarrier;
- an mbarrier is a phase, a pending-arrival count and a transaction count; a phase completes when
  both reach zero, and ``try_wait.parity p`` passes once the phase of parity p has completed (a
  fresh barrier: at once for p = 1);
- ``wgmma.mma_async`` runs when a ``wait_group`` lets its commit group complete (the latest moment
  a program may count on: reading an accumulator, or releasing its buffer, before the wait gives
  a wrong result), by the warpgroup's 128 threads together (each publishes the A fragment it
  passed at issue, each computes its own accumulators), reading shared memory through the matrix
  descriptor's canonical layouts (128-byte swizzle only): K-major, element (mn, k) at
  start + (mn / 8)·SBO + (mn % 8)·128 + 2k; MN-major, at start + (mn / 64)·LBO + 2·(mn % 64)
  + (k % 8)·128 + (k / 8)·SBO, then swizzled.

The blocks run one after the other, each on its own, its threads as cuda_on_cpu's fibers in a fixed
order (forward or reverse), with a barrier per block, per warpgroup and per warp; a thread that waits
on an mbarrier lets every other thread run first. For small shapes only: what it checks is the
kernel's indexing, its barriers' protocol (a wrong parity or count is a deadlock, which the run
reports) and its arithmetic, against the ISA's definitions as written here, not the hardware.
"""
from __future__ import annotations

import re

import numpy as np
from cuda_on_cpu import ORDERS, RUNTIME_API, SHUFFLES, _runtime_object, compile_and_run

from explorer.workloads import numpy_dtype

PRELUDE = RUNTIME_API + SHUFFLES + r"""
// The block's shared memory, one array: a shared address is an offset in it.
alignas(1024) static unsigned char emu_smem[256 * 1024];
static int emu_tid() { return emu_thread; }

// mbarriers, by shared address (a block's few: Q's and two per stage)
struct EmuBarrier { unsigned addr; int expected, pending; long tx; unsigned phase; };
static EmuBarrier emu_barriers[64];
static int emu_barrier_count;  // of the block running
static void emu_complete_if_done(EmuBarrier& b) {
  if (b.pending == 0 && b.tx == 0) { b.phase += 1; b.pending = b.expected; ++emu_progress; }
}
static EmuBarrier* emu_find_barrier(unsigned addr) {
  for (int i = 0; i < emu_barrier_count; ++i)
    if (emu_barriers[i].addr == addr) return &emu_barriers[i];
  return nullptr;
}
static void emu_mbarrier_init(unsigned addr, unsigned count) {
  EmuBarrier* b = emu_find_barrier(addr);
  if (!b) {
    if (emu_barrier_count == 64) { fprintf(stderr, "more than 64 mbarriers\n"); exit(3); }
    b = &emu_barriers[emu_barrier_count++];
  }
  *b = EmuBarrier{addr, (int)count, (int)count, 0, 0};
  ++emu_progress;
}
static EmuBarrier& emu_barrier_at(unsigned addr) {
  EmuBarrier* b = emu_find_barrier(addr);
  if (!b) { fprintf(stderr, "mbarrier at %u used before init\n", addr); exit(3); }
  return *b;
}
static void emu_mbarrier_arrive(unsigned addr, unsigned count, unsigned tx) {
  EmuBarrier& b = emu_barrier_at(addr);
  b.tx += tx;
  b.pending -= (int)count;
  if (b.pending < 0) { fprintf(stderr, "mbarrier at %u: more arrivals than expected\n", addr); exit(3); }
  emu_complete_if_done(b);
  ++emu_progress;
}
static void emu_complete_tx(unsigned addr, unsigned bytes) {
  EmuBarrier& b = emu_barrier_at(addr);
  b.tx -= bytes;
  emu_complete_if_done(b);
}
// try_wait.parity in a loop: the other threads run until the phase completes
static void emu_mbarrier_wait(unsigned addr, int parity) {
  EmuBarrier& b = emu_barrier_at(addr);
  while ((b.phase & 1) == (unsigned)(parity & 1)) emu_yield();
}

// TMA: a tiled 2D tensor map
struct EmuTensorMap { const unsigned char* base; long inner, outer, row_bytes, box_inner, box_outer, swizzle; };
static unsigned emu_swizzle128(unsigned addr) { return addr ^ (((addr >> 7) & 7) << 4); }
static void emu_tma_2d(unsigned dst, const EmuTensorMap* map, int x, int y, unsigned mbar) {
  if (map->swizzle != 3 || map->box_inner * 2 != 128) { fprintf(stderr, "only 128-byte swizzled boxes\n"); exit(3); }
  for (long r = 0; r < map->box_outer; ++r)
    for (long e = 0; e < map->box_inner; ++e) {
      unsigned short value = 0;
      if (y + r < map->outer && x + e < map->inner)
        memcpy(&value, map->base + (y + r) * map->row_bytes + (x + e) * 2, 2);
      memcpy(emu_smem + emu_swizzle128(dst + (unsigned)((r * map->box_inner + e) * 2)), &value, 2);
    }
  emu_complete_tx(mbar, (unsigned)(map->box_inner * map->box_outer * 2));
}

// wgmma descriptors and the product of one m64nNk16 instruction
static uint64_t emu_descriptor(unsigned start, int lbo, int sbo, int swizzle) {
  static const int layout[4] = {0, 3, 2, 1};  // CUtensorMapSwizzle -> the descriptor's layout type
  return (uint64_t)((start >> 4) & 0x3FFF) | ((uint64_t)(lbo & 0x3FFF) << 16) | ((uint64_t)(sbo & 0x3FFF) << 32)
       | ((uint64_t)layout[swizzle] << 62);
}
// A 16-bit element as float: float16, or bfloat16 (the high half of a float32).
static float emu_16bit(unsigned short bits, bool bf16) {
  if (bf16) { unsigned word = (unsigned)bits << 16; float f; memcpy(&f, &word, 4); return f; }
  __half h;
  memcpy(&h, &bits, 2);
  return __half2float(h);
}
static float emu_smem_half(uint64_t desc, int mn, int k, bool mn_major, bool bf16) {
  unsigned start = (unsigned)(desc & 0x3FFF) << 4, lbo = (unsigned)((desc >> 16) & 0x3FFF) << 4;
  unsigned sbo = (unsigned)((desc >> 32) & 0x3FFF) << 4;
  if ((desc >> 62) != 1) { fprintf(stderr, "only 128-byte swizzled operands\n"); exit(3); }
  unsigned addr = mn_major ? start + mn / 64 * lbo + mn % 64 * 2 + k % 8 * 128 + k / 8 * sbo
                           : start + mn / 8 * sbo + mn % 8 * 128 + k * 2;
  unsigned short bits;
  memcpy(&bits, emu_smem + emu_swizzle128(addr), 2);
  return emu_16bit(bits, bf16);
}
#define EMU_MAX_OPS 64  // a thread's issued wgmmas not yet run
static unsigned emu_a_regs[EMU_MAX_THREADS][EMU_MAX_OPS][4];  // per thread, the A fragment of each wgmma of a group
static float emu_a_register_half(int wg_base, int op, int m, int k, bool bf16) {
  // A fragment (rs): thread 32·(m / 16) + 4·(m % 8) + (k % 8) / 2 holds element (m, k) in half
  // e = 4·(k / 8) + 2·((m % 16) / 8) + k % 2 of its registers.
  int lane = m % 8 * 4 + k % 8 / 2, e = k / 8 * 4 + m % 16 / 8 * 2 + k % 2;
  unsigned word = emu_a_regs[wg_base + m / 16 * 32 + lane][op][e / 2];
  return emu_16bit((unsigned short)(e % 2 ? word >> 16 : word & 0xFFFF), bf16);
}
// An issued wgmma: its A fragment (rs) is read at issue, the rest when it runs. It runs when a
// wait_group lets it complete (the latest a program may count on), so a program that reads or
// rescales an accumulator before waiting, or releases a buffer too early, gets a wrong result.
struct EmuWgmma { int n; float* d[128]; bool rs; unsigned a[4]; uint64_t a_desc, b_desc; unsigned scale_d;
                  int trans_a, trans_b; bool bf16; };
// A thread's issued wgmmas in order: its committed groups' (group_sizes, oldest first), then the open group's.
struct EmuIssued { EmuWgmma ops[EMU_MAX_OPS]; int count, group_sizes[EMU_MAX_OPS], groups; };
static EmuIssued emu_issued[EMU_MAX_THREADS];
static void emu_wgmma(int n, float** d, const unsigned* a, uint64_t a_desc, uint64_t b_desc, unsigned scale_d,
                      int trans_a, int trans_b, bool bf16) {
  EmuIssued& issued = emu_issued[emu_tid()];
  if (issued.count == EMU_MAX_OPS) { fprintf(stderr, "more than %d wgmmas in flight\n", EMU_MAX_OPS); exit(3); }
  EmuWgmma& op = issued.ops[issued.count++];
  op.n = n, op.rs = a != nullptr, op.a_desc = a_desc, op.b_desc = b_desc, op.scale_d = scale_d;
  op.trans_a = trans_a, op.trans_b = trans_b, op.bf16 = bf16;
  memcpy(op.d, d, sizeof(float*) * (n / 2));
  for (int i = 0; i < 4; ++i) op.a[i] = a ? a[i] : 0;
}
// A commit group's wgmmas, in order, by the warpgroup's 128 threads together: each publishes the A fragments it
// passed, a barrier, each computes its own accumulators, a barrier (before the fragments are published again).
// Nothing writes shared memory while they run, so the group runs between two barriers, not two per wgmma (each
// barrier of 128 threads switches between all of them).
static void emu_run(const EmuWgmma* group, int size) {
  int t = emu_tid(), wg = t / 128, lt = t % 128, warp = lt / 32, lane = lt % 32;
  for (int j = 0; j < size; ++j)
    for (int i = 0; i < 4; ++i) emu_a_regs[t][j][i] = group[j].a[i];
  emu_sync_warpgroup();
  for (int j = 0; j < size; ++j) {
    const EmuWgmma& op = group[j];
    // Accumulator i of a thread is (row r, column c) with r = i % 4 / 2 and c = i / 4 * 2 + i % 2 of the 2 rows
    // of A and the n / 4 columns of B it reads: each of their elements read once, not once per accumulator.
    int row0 = warp * 16 + lane / 4;
    float a[2][16], b[64][16];
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < 16; ++k)
        a[r][k] = op.rs ? emu_a_register_half(wg * 128, j, row0 + r * 8, k, op.bf16)
                        : emu_smem_half(op.a_desc, row0 + r * 8, k, op.trans_a, op.bf16);
    for (int c = 0; c < op.n / 4; ++c)
      for (int k = 0; k < 16; ++k)
        b[c][k] = emu_smem_half(op.b_desc, c / 2 * 8 + lane % 4 * 2 + c % 2, k, op.trans_b, op.bf16);
    for (int i = 0; i < op.n / 2; ++i) {
      const float *x = a[i % 4 / 2], *y = b[i / 4 * 2 + i % 2];
      float sum = op.scale_d ? *op.d[i] : 0.0f;
      for (int k = 0; k < 16; ++k) sum += x[k] * y[k];
      *op.d[i] = sum;
    }
  }
  emu_sync_warpgroup();
}
static void emu_commit_group() {
  EmuIssued& issued = emu_issued[emu_tid()];
  int committed = 0;
  for (int g = 0; g < issued.groups; ++g) committed += issued.group_sizes[g];
  if (issued.groups == EMU_MAX_OPS) { fprintf(stderr, "more than %d wgmma groups in flight\n", EMU_MAX_OPS); exit(3); }
  issued.group_sizes[issued.groups++] = issued.count - committed;
}
static void emu_wait_group(int pending) {
  EmuIssued& issued = emu_issued[emu_tid()];
  while (issued.groups > pending) {
    int size = issued.group_sizes[0];
    emu_run(issued.ops, size);
    issued.count -= size;
    memmove(issued.ops, issued.ops + size, sizeof(EmuWgmma) * issued.count);
    memmove(issued.group_sizes, issued.group_sizes + 1, sizeof(int) * --issued.groups);
  }
}
static unsigned emu_pack_half2(float high, float low) {
  __half h = __float2half_rn(high), l = __float2half_rn(low);
  unsigned short hb, lb;
  memcpy(&hb, &h, 2);
  memcpy(&lb, &l, 2);
  return ((unsigned)hb << 16) | lb;
}
"""

HELPER_START = re.compile(r"^(?:__forceinline__ __device__|__device__ __forceinline__) (?:static )?(?:inline )?"
                          r"([\w ]+?) (\w+)\((.*?)\) \{")
# ... its name ends with the immediates: scale-a, scale-b, then transpose-a (ss only) and transpose-b.
WGMMA = re.compile(r"tvm_builtin_ptx_wgmma_(f16|bf16)_(ss|rs)_mma_async_sync_aligned_m64n(\d+)k16_\w+?_(-?1)_(-?1)_(\d)"
                   r"(?:_(\d))?$")
NO_OPS = re.compile(r"tvm_builtin_ptx_(fence_proxy|setmaxnreg|wgmma_fence)\w*$"
                    r"|tvm_builtin_cuda_warp_sync$|keep_register_\w+$")


def _emulation(name: str, params: str) -> str:
    """The body that stands for helper ``name`` (its parameters as the source declares them)."""
    names = [p.split()[-1].lstrip("*&") for p in params.split(",") if p.strip()]
    if NO_OPS.match(name):
        return ""
    wgmma = WGMMA.match(name)
    if wgmma:
        bf16, form, n = wgmma.group(1) == "bf16", wgmma.group(2), int(wgmma.group(3))
        trans_a, trans_b = (int(wgmma.group(6)), int(wgmma.group(7))) if form == "ss" else (0, int(wgmma.group(6)))
        d = ", ".join(f"&__d{i}" for i in range(n // 2))
        a = "a_regs" if form == "rs" else "nullptr"
        a_desc = "__a_desc" if form == "ss" else "0"
        regs = "unsigned a_regs[4] = {__a0, __a1, __a2, __a3}; " if form == "rs" else ""
        return (f"{regs}float* d[] = {{{d}}}; emu_wgmma({n}, d, {a}, {a_desc}, __b_desc, __scale_d, {trans_a}, "
                f"{trans_b}, {'true' if bf16 else 'false'});")
    bodies = {
        "tvm_builtin_cuda_cvta_generic_to_shared": "return (unsigned)((unsigned char*)p - emu_smem);",
        "tvm_builtin_ptx_mbarrier_init_init_shared_b64": "emu_mbarrier_init(__addr, __count);",
        "tvm_builtin_ptx_mbarrier_arrive_arrive_shared_b64": "emu_mbarrier_arrive(__addr, __count, 0);",
        "tvm_builtin_ptx_mbarrier_arrive_expect_tx_arrive_expect_tx_shared_b64":
            "emu_mbarrier_arrive(__addr, 1, __tx_count);",
        "tvm_builtin_cuda_mbarrier_wait": "emu_mbarrier_wait((unsigned)((unsigned char*)barrier - emu_smem), phase);",
        "tvm_builtin_cuda_cta_sync": "emu_sync();",
        "tvm_builtin_ptx_st_global_b32": "memcpy((void*)__addr, &__value, 4);",
        "tvm_builtin_ptx_cvt_f16x2_f32_rn_f16x2_f32": "__d = emu_pack_half2(__a, __b);",
        "ptx_wgmma_encode_matrix_descriptor":
            "*desc = emu_descriptor((unsigned)((unsigned char*)addr - emu_smem), ldo, sdo, swizzle);",
    }
    wait = re.match(r"tvm_builtin_ptx_wgmma_wait_group_wait_group_sync_aligned_(\d)$", name)
    if wait:
        return f"emu_wait_group({wait.group(1)});"
    if name == "tvm_builtin_ptx_wgmma_commit_group_commit_group_sync_aligned":
        return "emu_commit_group();"
    if name == "tvm_builtin_ptx_st_vec_global_v2_f32":
        return f"float v[2] = {{{names[1]}, {names[2]}}}; memcpy((void*){names[0]}, v, 8);"
    if name.startswith("tvm_builtin_ptx_cp_async_bulk_tensor_g2s_cluster_async_bulk_tensor_2d_") \
            and "multicast" not in name:
        return "emu_tma_2d(__dst_mem, (const EmuTensorMap*)__tmap, __coords0, __coords1, __mbar);"
    if name not in bodies:
        raise NotImplementedError(f"no CPU emulation of {name}")
    return bodies[name]


def _host_source(cuda: str) -> str:
    """The source with every instruction helper replaced by its emulation and the kernel made a
    host function."""
    out, lines, i = [], cuda.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        start = HELPER_START.match(line)
        if start or line.startswith("union GmmaDescriptor"):
            depth, j = 0, i
            while True:  # skip to the end of the definition
                depth += lines[j].count("{") - lines[j].count("}")
                if depth == 0 and "{" in "".join(lines[i:j + 1]):
                    break
                j += 1
            if start:
                ret, name, params = start.groups()
                out.append(f"static inline {ret} {name}({params}) {{ {_emulation(name, params)} }}")
            i = j + 1
            continue
        out.append(line)
        i += 1
    source = "\n".join(out)
    head, kernel = source.split('extern "C" __global__', 1)[0], source.rsplit('extern "C" __global__', 1)[1]
    for pattern, replacement in ((r"^ void __launch_bounds__\(\d+\)", "void"),
                                 (r"const __grid_constant__ CUtensorMap (\w+)", r"const EmuTensorMap& \1"),
                                 (r"extern __shared__ (?:__align__\(\d+\) )?(\w+) (\w+)\[\];",
                                  r"\1* \2 = (\1*)emu_smem;"),
                                 (r"\bthreadIdx\b", "emu_threadIdx"), (r"\bblockIdx\b", "emu_blockIdx"),
                                 (r"__shfl_xor_sync", "emu_shfl_xor"),
                                 # the warp index, the same in every lane (TVM broadcasts lane 0's)
                                 (r"__shfl_sync\(\(uint\)4294967295, (.*?), 0, 32\)", r"\1"),
                                 (r"(?<![\w.])max\(", "emu_max("), (r"(?<![\w.])min\(", "emu_min(")):
        kernel = re.sub(pattern, replacement, kernel, flags=re.M)
    return head + kernel


TENSOR_MAP = re.compile(r'T\.call_packed\("runtime\.cuTensorMapEncodeTiled", (\w+), "\w+", 2, (\w+)\.data, '
                        r"((?:\d+, ){10}\d+)\)")


def run_hopper_on_cpu(built, inputs: list[np.ndarray], timeout_s: int = 600, order: str = "forward") -> np.ndarray:
    """The output of ``built``'s one kernel on ``inputs`` (the workload's), the threads of a block run in
    ``order`` (cuda_on_cpu.ORDERS)."""
    workload = built.spec.workload
    arrays = dict(zip(workload.input_names, inputs, strict=True))
    out = workload.output_name
    arrays[out] = np.full(workload.output_shape(), np.nan, numpy_dtype(workload.output_dtype()))
    names = list(arrays)
    (kernel,) = built.kernels
    source = _host_source(built.cuda)
    # The buffers and tensor maps are globals, for the threads' function.
    globals_, main = [], ["int main(int argc, char** argv) {", "  emu_reverse = atoi(argv[1]);"]
    for i, name in enumerate(names):
        array = arrays[name]
        globals_.append(f"alignas(16) static unsigned char {name}_buf[{array.nbytes}];")
        main.append(f"  {{ FILE* f = fopen(argv[{i + 2}], \"rb\"); fread({name}_buf, 1, {array.nbytes}, f); "
                    "fclose(f); }")
    for map_name, buffer, args in TENSOR_MAP.findall(built.tensorir):
        inner, outer, row_bytes, box_inner, box_outer, _, _, _, swizzle, _, _ = (int(a) for a in args.split(", "))
        globals_.append(f"static const EmuTensorMap {map_name}{{{buffer}_buf, {inner}, {outer}, {row_bytes}, "
                        f"{box_inner}, {box_outer}, {swizzle}}};")
    signature = re.search(rf"void {kernel.name}\(([^)]*)\)", source).group(1)
    arguments = []
    for parameter in signature.split(","):
        pointer = re.search(r"(\w+)\* __restrict__ (\w+)_ptr", parameter)
        if pointer:
            arguments.append(f"({pointer.group(1)}*){pointer.group(2)}_buf")
        else:
            arguments.append(parameter.split()[-1])
    # The threads of a block are cuda_on_cpu's fibers; a block starts with fresh shared memory (garbage, as on a
    # GPU), no mbarrier and no wgmma left running from the last block.
    globals_.append("\n".join([
        "static void emu_block_reset() {",
        "  emu_barrier_count = 0;",
        "  memset(emu_smem, 0xFF, sizeof(emu_smem));",
        "}",
        "static void emu_thread_main() {",
        "  emu_collectives[emu_thread] = 0;",
        "  emu_issued[emu_thread].count = emu_issued[emu_thread].groups = 0;",
        f"  {kernel.name}({', '.join(arguments)});",
        "}"]))
    main.append("  emu_block_start = emu_block_reset;")
    main.append(f"  emu_launch({', '.join(map(str, (*kernel.grid, *kernel.block)))}, emu_thread_main);")
    main.append(f"  {{ FILE* f = fopen(argv[{len(names) + 2}], \"wb\"); fwrite({out}_buf, 1, sizeof({out}_buf), f); "
                f"fclose(f); }}")
    main.append("  return 0;\n}")
    output = compile_and_run("\n".join([PRELUDE + source, *globals_, *main]), [arrays[name] for name in names],
                             arrays[out].dtype, timeout_s, objects=(_runtime_object(),),
                             arguments=(str(ORDERS.index(order)),))
    return output.reshape(workload.output_shape()).astype("float32")
