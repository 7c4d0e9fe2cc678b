"""SASS from the cubin that NVRTC compiles, with no CUDA toolkit on PATH: a hand-made kernel's
instruction mix counted by hand, source lines, registers and spills, real presets, the tab."""
import os
import shutil
import subprocess

import pytest
from compiled_together import one_source_per_preamble

from explorer import cuda_compile
from explorer.analysis import sass
from explorer.analysis.sass import compile_binary
from explorer.build import build
from explorer.cuda_compile import nvcc_path
from explorer.presets import get_preset

pytestmark = pytest.mark.skipif(
    bool(sass.missing_tools()), reason=sass.missing_tools() or "the pip NVRTC and disassembler are installed")

# Line numbers matter: the tests look instructions up by the line of their CUDA statement.
HAND_MADE = """\
#ifndef __CUDACC_RTC__
#include <cuda.h>
#endif
extern "C" __global__ void __launch_bounds__(64) mix_kernel(float* __restrict__ out, const float* __restrict__ in,
                                                            int n) {
  __shared__ float tile[256];
  ((float4*)tile)[threadIdx.x] = ((const float4*)in)[threadIdx.x];
  __syncthreads();
  float acc = in[256 + threadIdx.x];
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    float2 w = ((float2*)tile)[(threadIdx.x + i) & 127];
    float4 u = ((float4*)tile)[(threadIdx.x + 2 * i) & 63];
    acc = fmaf(w.x, u.x, acc);
    acc = fmaf(w.y, u.y, acc);
    acc = (acc + u.z) * u.w;
  }
  out[threadIdx.x] = acc;
}
"""


def line_of(source: str, fragment: str) -> int:
    (number,) = [n for n, line in enumerate(source.splitlines(), start=1) if fragment in line]
    return number


@pytest.fixture(scope="module")
def compiled_here(tmp_path_factory):
    """This module's own cubin cache and memory of reports, empty at its start: each kernel that the
    no-toolkit tests look at is compiled for real once, in the first of them, and the others share it."""
    return tmp_path_factory.mktemp("cuda-cache"), {}


@pytest.fixture
def no_toolkit(monkeypatch, compiled_here):
    """PATH without any nvcc, and nvcc unusable for the fallback: everything must come from
    pip; reports from this module's no-toolkit tests only (compiled_here), never from the
    memory of a test that had the toolkit. Yields the cubin cache folder."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "nvcc")))
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sass, "nvcc_path", lambda: None)
    cache, reports = compiled_here
    monkeypatch.setattr(cuda_compile, "CUDA_CACHE", str(cache))

    def no_nvcc(*args, **kwargs):
        raise AssertionError("nvcc must not be used")

    compile_and_analyze = sass.analyze_source.__wrapped__  # past the library's memory

    def analyze_here(cuda: str, arch: str) -> sass.SassReport:
        if (cuda, arch) not in reports:
            reports[cuda, arch] = compile_and_analyze(cuda, arch)
        return reports[cuda, arch]

    monkeypatch.setattr(sass, "nvcc_binary", no_nvcc)
    monkeypatch.setattr(sass, "analyze_source", analyze_here)
    assert shutil.which("nvcc") is None
    yield cache


# The suite's cubins and disassemblies (TMPDIR's), which every test process reads and writes.
SUITE_CACHE = cuda_compile.CUDA_CACHE


@pytest.fixture
def presets_no_toolkit(no_toolkit, monkeypatch):
    """no_toolkit for the real presets, whose cubins and disassemblies are the suite's (SUITE_CACHE, keyed by
    the CUDA source and the NVRTC settings, which the toolkit on PATH leaves alike): a preset that another test
    compiles too (dw-blog-final-96: test_app.py's tabs) is compiled and disassembled once per run. The
    hand-made kernel, which no other test compiles, stays in this module's cache (no_toolkit), where NVRTC
    compiles it with no toolkit."""
    monkeypatch.setattr(cuda_compile, "CUDA_CACHE", SUITE_CACHE)


def test_width_of_loads_and_stores():
    assert [sass.width_bits(op) for op in ("LDS", "LDS.64", "LDS.U.128", "LDG.E.128.CONSTANT", "LDG.E", "STS.U8",
                                           "STG.E.U16", "STL.64")] == [32, 64, 128, 128, 32, 8, 16, 64]


def test_parse_a_disassembly():
    text = """\
//--------------------- .text.k         --------------------------
	.section	.text.k,"ax",@progbits
k:
.L_x_1:
	//## File "kernel.cu", line 7
        /*0000*/                   LDS.64 R2, [R0] ;
	//## File "kernel.cu", line 9
        /*0010*/               @!P0 BRA `(.L_x_1) ;
        /*0020*/                   EXIT ;
.L_x_2:
        /*0030*/                   BRA `(.L_x_2);
        /*0040*/                   NOP;
"""
    (name, instructions), = sass.parse_sass(text).items()
    assert name == "k"
    assert [(i.address, i.predicate, i.opcode, i.line, i.label) for i in instructions] == [
        (0, "", "LDS.64", 7, ".L_x_1"), (0x10, "@!P0", "BRA", 9, ""), (0x20, "", "EXIT", 9, ""),
        (0x30, "", "BRA", 9, ".L_x_2"), (0x40, "", "NOP", 9, "")]
    mix = sass.instruction_mix(instructions)
    # the branch to itself after EXIT is not counted; the one back to 0x0 is a loop; NOP is padding
    assert (mix.instructions, mix.branches, mix.loop_branches, mix.memory["LDS"]) == (4, 1, 1, {64: 1})
    assert instructions[1].text == "@!P0 BRA `(.L_x_1) ;"


def test_resource_usage_lines():
    text = "Resource usage:\n Function k:\n  REG:15 STACK:8 SHARED:2048 LOCAL:0 CONSTANT[0]:548 TEXTURE:0\n"
    assert cuda_compile.parse_resource_usage(text) == {"k": {"REG": 15, "STACK": 8, "SHARED": 2048, "LOCAL": 0,
                                                     "CONSTANT[0]": 548, "TEXTURE": 0}}


def test_hand_made_kernel_mix_counted_by_hand(no_toolkit):
    (kernel,) = sass.analyze_source(HAND_MADE, "sm_90").kernels
    assert list(no_toolkit.glob("lineinfo/*.bin")), "the cubin is kept in the build's cache"
    mix = kernel.mix
    # line 6: one float4 global load, one float4 shared store; line 8: one float global load;
    # the loop (kept rolled by #pragma unroll 1): a float2 and a float4 shared load, 2 fmaf,
    # one add, one multiply; one __syncthreads; the float store; a branch that skips the loop
    # when n < 1 and the loop's branch back.
    assert (mix.ffma, mix.fadd, mix.fmul, mix.bar, mix.ldsm) == (2, 1, 1, 1, 0)
    assert mix.memory == {"LDS": {64: 1, 128: 1}, "STS": {128: 1}, "LDG": {32: 1, 128: 1}, "STG": {32: 1},
                          "LDL": {}, "STL": {}}
    assert (mix.branches, mix.loop_branches, mix.spill_bytes) == (2, 1, 0)
    assert kernel.kernel == "mix_kernel" and kernel.registers > 0


def test_a_cubins_disassembly_is_kept_on_disk_for_every_process(no_toolkit, monkeypatch):
    cubin = cuda_compile.compile_cubin(HAND_MADE, "sm_90")
    disassembled = cuda_compile.disassemble(cubin)
    assert "FFMA" in disassembled[0] and "REG:" in disassembled[1]
    assert len(list((no_toolkit / "sass").glob("*.json"))) == 1
    ran = []
    monkeypatch.setattr(cuda_compile, "_run", lambda *args: ran.append(args))
    assert cuda_compile.disassemble(cubin) == disassembled and ran == []  # read back, no tool started
    monkeypatch.setattr(cuda_compile, "tool_path", lambda name: f"/another/{name}")
    cuda_compile.disassemble(cubin)
    assert len(ran) == 2  # other tools: disassembled again


def test_code_generation_and_the_sass_view_share_one_nvrtc_compile(no_toolkit, monkeypatch):
    """A GPU machine's code generation compiles each kernel through tvm_callback_cuda_compile:
    it gets the cubin with line info that the SASS view, the resources and the diagnosis read, so a
    setting is compiled by NVRTC once, whichever process asks first."""
    import tvm
    from tvm.support import nvcc as tvm_nvcc

    compiles = []
    nvrtc_compile = tvm_nvcc.compile_cuda
    monkeypatch.setattr(tvm_nvcc, "compile_cuda", lambda *args, **kw: compiles.append(kw) or nvrtc_compile(*args, **kw))
    source = HAND_MADE.replace("mix_kernel", "shared_kernel")  # a source no other test compiled
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}):
        generated = bytes(tvm.get_global_func("tvm_callback_cuda_compile")(source))
    assert cuda_compile.compile_cubin(source, "sm_90") == generated
    assert [kw["options"] for kw in compiles] == [["-lineinfo"]]
    with tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), pytest.raises(Exception, match="identifier"):
        tvm.get_global_func("tvm_callback_cuda_compile")(source.replace("__syncthreads()", "no_such_barrier()"))


def test_code_generation_compiles_for_the_builds_architecture(monkeypatch):
    """The CUDA compile inside code generation (a GPU machine's) reads the architecture from the
    current target: the build's, which is sm_90a for a Hopper template on a GPU that reports sm_90
    (wgmma needs it), and the one the analyses compile the same source for."""
    import tvm

    from explorer import build as build_module

    seen = []
    generate = build_module._tir_build.tir_to_runtime

    def recording(*args):
        seen.append(str(tvm.target.Target.current().attrs["arch"]))
        return generate(*args)

    monkeypatch.setattr(build_module._tir_build, "tir_to_runtime", recording)
    for preset in ("hopper-ws-fp16-4096", "modern-async-1024"):
        built = build_module._build_cached.__wrapped__(get_preset(preset).spec, '{"kind": "cuda", "arch": "sm_90"}')
        assert seen[-1] == str(built.target.attrs["arch"])
    assert seen == ["sm_90a", "sm_90"]


def test_instructions_sit_under_their_cuda_line(no_toolkit):
    (kernel,) = sass.analyze_source(HAND_MADE, "sm_90").kernels
    lines = {i.opcode.split(".")[0] + "." + str(sass.width_bits(i.opcode)): i.line for i in kernel.instructions
             if i.opcode.startswith(("LDS", "STS"))}
    # the #include <cuda.h> line that TVM's NVRTC path drops does not shift the numbers
    assert lines == {"LDS.64": line_of(HAND_MADE, "float2 w"), "LDS.128": line_of(HAND_MADE, "float4 u"),
                     "STS.128": line_of(HAND_MADE, "((float4*)tile)[threadIdx.x]")}
    assert {i.line for i in kernel.instructions if i.opcode.startswith("BAR")} == {line_of(HAND_MADE, "__syncthreads")}
    text = sass.sass_text(kernel, HAND_MADE, order="line")
    under = text.split(f"// {line_of(HAND_MADE, 'float2 w')}: ")[1].split("\n// ")[0]
    assert "LDS.64" in under and "LDS.128" not in under


def test_registers_and_spills_come_from_the_cubin(presets_no_toolkit):
    built = build(get_preset("dw-blog-final-96").spec, "h100")
    binary = compile_binary(built)
    (kernel,) = sass.analyze_sass(built).kernels
    assert binary.tool == "nvrtc" and binary.arch == str(built.target.arch)
    assert binary.registers == {"main_kernel": kernel.registers} and kernel.registers > 0
    assert binary.spill_bytes == {"main_kernel": 0}
    assert "LDS" in binary.sass


# 48 values live across 8 × 48 unrolled multiplies, in the 32 registers that 1024 threads × 2 blocks leave each
# thread: ptxas spills (720 bytes stored, 1,296 loaded on sm_90). More rounds of multiplies spill more and only
# take longer to compile.
SPILLING = """\
extern "C" __global__ void __launch_bounds__(1024, 2) spill_kernel(float* __restrict__ out,
                                                                   const float* __restrict__ in) {
  float v[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) v[i] = in[threadIdx.x * 48 + i];
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 48; ++i) acc = fmaf(v[i], v[(i + j) % 48], acc);
  out[threadIdx.x] = acc;
}
"""


@pytest.mark.skipif(nvcc_path() is None, reason="the cross-check needs nvcc")
@pytest.mark.parametrize("arch, sources", [("sm_90", (HAND_MADE, SPILLING)), ("sm_80", (HAND_MADE,))],
                         ids=["sm_90", "sm_80"])
def test_registers_and_spills_agree_with_ptxas(arch, sources, tmp_path, compiled_here, monkeypatch):
    """nvcc's own ptxas report of the same sources (fast math, as TVM compiles), in one compile per architecture
    (ptxas reports each kernel's own allocation), says the same. NVRTC's cubin and its disassembly from this
    module's cache: the hand-made kernel's for sm_90 as the no-toolkit tests compiled it (the cache is keyed by
    the NVRTC settings, which the toolkit on PATH leaves alike)."""
    monkeypatch.setattr(cuda_compile, "CUDA_CACHE", str(compiled_here[0]))
    path = tmp_path / "kernels.cu"
    path.write_text("\n".join(sources))
    log = subprocess.run([nvcc_path(), "--cubin", f"-arch={arch}", "-O3", "--use_fast_math", "-Xptxas", "-v",
                          "-o", str(tmp_path / "k.cubin"), str(path)], capture_output=True, text=True).stderr
    reported = {entry.split("'")[0]: entry for entry in log.split("Compiling entry function '")[1:]}
    kernels = {source: sass.analyze_source(source, arch).kernels for source in sources}
    assert reported.keys() == {kernel.kernel for (kernel,) in kernels.values()}
    for source, (kernel,) in kernels.items():
        report = reported[kernel.kernel]
        registers = int(report.split("Used ")[1].split(" registers")[0])
        stores, loads = (int(report.split(f" bytes spill {kind}")[0].split()[-1]) for kind in ("stores", "loads"))
        assert kernel.registers == registers
        assert kernel.mix.spill_bytes == stores + loads
        assert (stores + loads > 0) == (source == SPILLING)


def test_real_preset_shows_its_vector_shared_loads(presets_no_toolkit):
    """The final depthwise step reads the 3×3 filter from shared memory as two 128-bit loads
    and one 32-bit load (9 floats), and the input one float at a time."""
    built = build(get_preset("dw-blog-final-96").spec, "h100")
    (kernel,) = sass.analyze_sass(built).kernels
    source = built.cuda.splitlines()
    wide = [i for i in kernel.instructions if i.opcode == "LDS.128"]
    assert len(wide) == 2
    assert all("Filter_shared_ptr" in source[i.line - 1] for i in wide)
    assert kernel.mix.ffma == 4 * 2 * 9  # 8 outputs per thread × 9 taps, fully unrolled
    assert kernel.mix.bar == 1


def test_contiguous_thread_tiles_load_shared_memory_in_vectors(presets_no_toolkit):
    """8×8 threads, each with a 4×4 tile of neighbouring outputs (vthread case 1), read their
    inputs as LDS.64/LDS.128; with vthreads the same tile is strided (case 2) and every read
    is a 32-bit LDS: the same FFMAs, several times the shared-load instructions."""
    tiled, strided = (sass.analyze_sass(build(get_preset(p).spec, "h100")).kernels[0].mix
                      for p in ("dw-blog-vthread-case1", "dw-blog-vthread-case2"))
    assert tiled.ffma == strided.ffma
    assert tiled.memory["LDS"].get(64, 0) > 0 and strided.memory["LDS"].get(64, 0) == 0
    assert 2 * sum(tiled.memory["LDS"].values()) < sum(strided.memory["LDS"].values())


def test_a_long_thread_strip_goes_to_local_memory(presets_no_toolkit):
    """Threads case 3 (32 outputs per thread in a column) keeps part of its strip in local
    memory (a stack frame, LDL/STL), which case 2 (8 outputs) does not."""
    long_strip, short_strip = (sass.analyze_sass(build(get_preset(p).spec, "h100")).kernels[0]
                               for p in ("dw-blog-threads-case3", "dw-blog-threads-case2"))
    assert long_strip.stack_bytes > 0 and long_strip.mix.memory["LDL"] and long_strip.mix.spill_bytes > 0
    assert short_strip.stack_bytes == 0 and short_strip.mix.spill_bytes == 0


def test_unrolling_removes_branches_and_widens_shared_loads(presets_no_toolkit):
    """conv1d v5 with and without its unroll knob: unrolled, the reduction's branches go and
    the four 32-bit shared loads of consecutive taps become one 128-bit load."""
    spec = get_preset("conv1d-v5").spec
    unrolled = sass.analyze_sass(build(spec.with_knobs(unroll=True), "h100")).kernels[0].mix
    rolled = sass.analyze_sass(build(spec.with_knobs(unroll=False), "h100")).kernels[0].mix
    assert unrolled.branches < rolled.branches
    assert rolled.memory["LDS"] == {32: 4 * unrolled.memory["LDS"][128]}
    assert unrolled.ffma == rolled.ffma


def test_warp_shuffles_are_counted(presets_no_toolkit):
    """reduce-shuffle's last warp is five __shfl_down_sync steps in each of its two kernels; the
    sequential tree of kernel 3 has none (its last steps go through shared memory)."""
    shuffle, sequential = (sass.analyze_sass(build(get_preset(p).spec, "h100"))
                           for p in ("reduce-shuffle", "reduce-3-sequential"))
    assert [k.mix.shfl for k in shuffle.kernels] == [5, 5]
    assert {i.opcode for k in shuffle.kernels for i in k.instructions if i.opcode.startswith("SHFL")} == {"SHFL.DOWN"}
    assert all("SHFL 5" in sass.mix_summary(k.mix) for k in shuffle.kernels)
    assert [k.mix.shfl for k in sequential.kernels] == [0, 0]
    assert all("SHFL" not in sass.mix_summary(k.mix) for k in sequential.kernels)
    assert ("SHFL", 0) in sequential.kernels[0].mix.rows()  # the row is there for every kernel, so tries line up


@pytest.mark.skipif(nvcc_path() is None, reason="the cross-check needs nvcc")
def test_nvcc_compiles_the_same_shuffles(tmp_path):
    """nvcc's cubin of the same CUDA (fast math, as TVM compiles), disassembled: SHFL.DOWN five times per
    kernel for reduce-shuffle, never for reduce-3-sequential. Both settings' kernels in one compile
    (one_source_per_preamble: reduce-shuffle's preamble adds only its shuffle macros for GPUs before sm_70)."""
    builds = {preset.replace("-", "_"): build(get_preset(preset).spec, "h100")
              for preset in ("reduce-shuffle", "reduce-3-sequential")}
    (arch,) = {str(built.target.arch) for built in builds.values()}
    (source,) = one_source_per_preamble(builds)
    path, cubin = tmp_path / "kernels.cu", tmp_path / "kernels.cubin"
    path.write_text(source)
    subprocess.run([nvcc_path(), "--cubin", f"-arch={arch}", "-O3", "--use_fast_math", "-o", str(cubin), str(path)],
                   check=True, capture_output=True)
    kernels = sass.parse_sass(cuda_compile.disassemble(cubin.read_bytes())[0])
    found = {name: [i.opcode for i in instructions if i.opcode.startswith("SHFL")]
             for name, instructions in kernels.items()}
    assert found == {"reduce_shuffle_main_kernel": ["SHFL.DOWN"] * 5, "reduce_shuffle_main_kernel_1": ["SHFL.DOWN"] * 5,
                     "reduce_3_sequential_main_kernel": [], "reduce_3_sequential_main_kernel_1": []}


def test_cli_sass_view(presets_no_toolkit, capsys):
    from explorer.cli import main

    assert main(["show", "conv1d-v5", "--view", "sass", "--target", "h100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("kernel main_kernel (sm_90")
    assert "  mix: FFMA 32" in out and "LDS.128" in out
    (kernel,) = sass.analyze_sass(build(get_preset("dw-blog-final-96").spec, "h100")).kernels
    assert main(["show", "dw-blog-final-96", "--view", "resources", "--target", "h100"]) == 0
    assert f"registers/thread {kernel.registers}," in capsys.readouterr().out


def test_sass_tab_renders_and_diffs(presets_no_toolkit):  # conv1d-v5's cubins, as the tests above compiled them
    from test_app import app, assert_clean, code_text

    at = app({"preset": "conv1d-v5"}, view="SASS").run()
    assert_clean(at)
    built = build(get_preset("conv1d-v5").spec, at.session_state["target"])
    (kernel,) = sass.analyze_sass(built).kernels
    assert code_text(at, "sass") == sass.sass_text(kernel, built.cuda)
    mix = at.dataframe[0].value
    assert dict(zip(mix["instruction"], mix["count"], strict=True)) == dict(kernel.mix.rows())
    at.sidebar.toggle(key="knob:conv1d.unroll").set_value(False).run()
    assert_clean(at)
    mix = at.dataframe[0].value
    counts = dict(zip(mix["instruction"], mix["previous try"], strict=True))
    assert counts["LDS.128"] > 0 and "LDS.128" not in code_text(at, "sass")
    at.toggle(key="ui.diff").set_value(True).run()
    assert_clean(at)
    removed = [line for line in code_text(at, "sass-diff").splitlines() if line.startswith("-")]
    assert any("LDS.128" in line for line in removed)


def test_nvccs_log_is_kept_on_disk_by_source_architecture_and_nvcc(monkeypatch, tmp_path):
    """nvcc's report is read back from the cubins' folder: the same source, architecture and nvcc
    compile once per machine; another of any of them compiles again."""
    import sys

    runs = []

    class Done:
        returncode, stdout = 0, "\tLDS R1, [R2]\n"

        def __init__(self, command):
            self.stderr = f"ptxas info    : Compiling entry function 'k' for '{command[2][6:]}'\n" \
                          "ptxas info    : Used 24 registers, 1024 bytes smem\n"

    def nvcc_or_cuobjdump(command, **kwargs):
        runs.append(os.path.basename(command[0]))
        return Done(command)

    monkeypatch.setattr(cuda_compile, "CUDA_CACHE", str(tmp_path))
    monkeypatch.setattr(cuda_compile.subprocess, "run", nvcc_or_cuobjdump)
    monkeypatch.setattr(cuda_compile.shutil, "which", lambda name, path=None: "cuobjdump")
    compile_here = cuda_compile.nvcc_binary.__wrapped__  # past the process's memory
    monkeypatch.setattr(cuda_compile, "nvcc_path", lambda: sys.executable)  # a file that is there
    first = compile_here("__global__ void k() {}", "sm_90")
    assert first.registers == {"k": 24} and first.shared_bytes == {"k": 1024} and first.sass == "\tLDS R1, [R2]\n"
    assert len(runs) == 2  # nvcc, then cuobjdump
    assert compile_here("__global__ void k() {}", "sm_90") == first and len(runs) == 2  # read back
    assert compile_here("__global__ void k() {}", "sm_80").arch == "sm_80" and len(runs) == 4
    assert compile_here("__global__ void k() { }", "sm_90").registers == {"k": 24} and len(runs) == 6
    monkeypatch.setattr(cuda_compile, "nvcc_path", lambda: "/bin/sh")  # another nvcc
    compile_here("__global__ void k() {}", "sm_90")
    assert len(runs) == 8


def test_binary_falls_back_to_nvcc_then_to_nothing(monkeypatch):
    built = build(get_preset("dw-blog-final-96").spec, "h100")
    monkeypatch.setattr(sass, "missing_tools", lambda: "The SASS view needs nvdisasm.")
    if nvcc_path() is not None:
        assert compile_binary(built).tool == "nvcc"
    monkeypatch.setattr(sass, "nvcc_path", lambda: None)
    assert compile_binary(built) is None


def test_line_info_changes_nothing_in_the_code(presets_no_toolkit):
    """The cubin shown is the kernel TVM runs: compiled by TVM's NVRTC path without -lineinfo
    (and without the #line directives), it has the same instructions and registers."""
    from tvm.support import nvcc

    built = build(get_preset("dw-blog-threads-case3").spec, "h100")
    arch = str(built.target.arch)
    (shown,) = sass.analyze_sass(built).kernels
    with cuda_compile._nvrtc_environment():
        plain = bytes(nvcc.compile_cuda(built.cuda, target_format="cubin", arch=arch, compiler="nvrtc"))
    text, usage = cuda_compile.disassemble(plain)
    (instructions,) = sass.parse_sass(text).values()
    assert [i.text for i in instructions] == [i.text for i in shown.instructions]
    assert cuda_compile.parse_resource_usage(usage)["main_kernel"]["REG"] == shown.registers


def test_without_the_tools_one_sentence_says_what_to_install(monkeypatch, capsys):
    from test_app import app, assert_clean

    from explorer.cli import main

    reason = "The SASS view needs nvdisasm: pip install -r requirements.txt installs them."
    monkeypatch.setattr(sass, "missing_tools", lambda: reason)
    # past the memory of reports (a report kept there was made with the tools), for this test only: the
    # reports stay for the later files of this test process
    monkeypatch.setattr(sass, "analyze_source", sass.analyze_source.__wrapped__)
    assert main(["show", "conv1d-v5", "--view", "sass", "--target", "h100"]) == 2
    assert capsys.readouterr().err == f"error: {reason}\n"
    at = app({"preset": "conv1d-v5"}, view="SASS").run()
    assert_clean(at)
    assert [i.value for i in at.info] == [reason]
