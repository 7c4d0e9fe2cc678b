"""The SASS of a build: the machine code the GPU runs, grouped under the CUDA line that
produced it, an instruction mix per kernel, and registers/shared/local memory per kernel.

The compile stage (:mod:`explorer.cuda_compile`) compiles the generated CUDA to a cubin with
``-lineinfo`` (NVRTC, no toolkit needed), disassembles it (``nvdisasm -g``) and reads its
resource usage (``cuobjdump``); this module parses and reports them. The cubin is kept on
disk like TVM's own compiles (in a ``lineinfo`` folder of the same cache) and its disassembly
beside it (``sass``), both for every process of the machine; the parsed result in memory, by
(CUDA source, architecture).
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import asdict, dataclass

from ..cuda_compile import (
    Binary,
    compile_cubin,
    disassemble,
    missing_tools,
    nvcc_binary,
    nvcc_path,
    parse_resource_usage,
)
from ..errors import ExplorerError

WIDTHS = (8, 16, 32, 64, 128)  # bits moved per thread by one load or store
_SIZED = ("LDS", "STS", "LDG", "STG", "LDL", "STL")  # memory instructions counted per width
_BRANCHES = {"BRA", "BRX", "JMP", "JMX"}
_PADDING = {"NOP"}  # fills the section after the kernel's end
SOURCE_WIDTH = 120  # CUDA lines longer than this are cut in the SASS text
SHARED_NOTE = ("Shared memory is the cubin's, its static arrays aligned (and on sm_90, for a kernel that uses shared "
               "memory, 1 KB more that the system reserves per block), plus the dynamic allocation the kernel is "
               "launched with, which a cubin does not hold.")


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str  # "@P0", "@!P1" or ""
    opcode: str  # with its modifiers, e.g. "LDS.64" or "LDG.E.128.CONSTANT"
    operands: str
    line: int | None  # line of the CUDA source that produced it (None: no line info)
    label: str = ""  # the branch label that names this address, if any

    @property
    def text(self) -> str:
        return " ".join(part for part in (self.predicate, self.opcode, self.operands) if part) + " ;"


def width_bits(opcode: str) -> int:
    """Bits per thread a load/store moves: ``LDS.64`` 64, ``LDG.E.128.CONSTANT`` 128,
    ``STS.U8`` 8, a plain ``LDS``/``LDG.E`` 32."""
    modifiers = opcode.split(".")[1:]
    for modifier in modifiers:
        if modifier in ("64", "128"):
            return int(modifier)
        if modifier in ("U8", "S8", "U16", "S16"):
            return int(modifier[1:])
    return 32


@dataclass(frozen=True)
class InstructionMix:
    """Static counts (each instruction once, however often it runs) of one kernel."""

    instructions: int  # all but the NOP padding
    ffma: int
    fadd: int
    fmul: int
    memory: dict  # "LDS" | "STS" | "LDG" | "STG" | "LDL" | "STL" -> {width in bits: count}
    ldsm: int  # ldmatrix: a warp loads 8×8 matrices from shared memory for tensor cores
    bar: int  # barriers (__syncthreads)
    branches: int  # BRA/BRX/JMP/JMX, not the end-of-kernel branch to itself
    loop_branches: int  # of those, branches back to an earlier address: a loop not unrolled
    hmma: int = 0  # mma.sync: a warp multiplies a tile on the tensor cores (Volta to Hopper)
    hgmma: int = 0  # wgmma: a warpgroup multiplies a 64-row tile from shared memory (Hopper)
    tma: int = 0  # UTMALDG/UTMASTG: one thread hands a whole tile copy to the TMA unit (Hopper)
    shfl: int = 0  # warp shuffles (__shfl_*_sync): a lane reads another lane's register, no shared memory

    @property
    def spill_bytes(self) -> int:
        """Bytes per thread of the local-memory loads and stores in the code: ptxas's
        "spill stores + spill loads" (an array the compiler cannot keep in registers
        counts too)."""
        return sum(width // 8 * n for op in ("LDL", "STL") for width, n in self.memory[op].items())

    def rows(self) -> list[tuple[str, int]]:
        """(label, count) for a table: the arithmetic, each memory kind by width, control."""
        rows = [("FFMA", self.ffma), ("FADD", self.fadd), ("FMUL", self.fmul)]
        for op in _SIZED:  # the same rows for every kernel (local memory: the widths it has), so tries line up
            widths = sorted(set(self.memory[op]) | (set() if op in ("LDL", "STL") else {32, 64, 128}))
            rows += [(f"{op}.{width}", self.memory[op].get(width, 0)) for width in widths] or [(op, 0)]
        rows += [("LDSM", self.ldsm), ("HMMA", self.hmma), ("HGMMA", self.hgmma), ("TMA", self.tma),
                 ("SHFL", self.shfl), ("BAR", self.bar), ("branches", self.branches),
                 ("loop branches (backward)", self.loop_branches), ("instructions", self.instructions)]
        return rows


def instruction_mix(instructions: tuple[Instruction, ...]) -> InstructionMix:
    addresses = {ins.label: ins.address for ins in instructions if ins.label}
    counts = Counter(ins.opcode.split(".")[0] for ins in instructions)
    memory = {op: dict(sorted(Counter(width_bits(i.opcode) for i in instructions
                                      if i.opcode.split(".")[0] == op).items())) for op in _SIZED}
    branches = loops = 0
    for ins in instructions:
        if ins.opcode.split(".")[0] not in _BRANCHES:
            continue
        target = re.search(r"`\((\.L\w+)\)", ins.operands)
        destination = addresses.get(target.group(1)) if target else None
        if destination == ins.address:
            continue  # the trap after EXIT that keeps the prefetcher in the kernel
        branches += 1
        loops += destination is not None and destination < ins.address
    return InstructionMix(
        instructions=sum(n for op, n in counts.items() if op not in _PADDING),
        ffma=counts["FFMA"], fadd=counts["FADD"], fmul=counts["FMUL"], memory=memory,
        ldsm=counts["LDSM"], hmma=counts["HMMA"], hgmma=counts["HGMMA"], tma=counts["UTMALDG"] + counts["UTMASTG"],
        shfl=counts["SHFL"], bar=counts["BAR"], branches=branches, loop_branches=loops,
    )


@dataclass(frozen=True)
class KernelSass:
    kernel: str
    registers: int  # per thread
    shared_bytes: int  # shared memory per block in the cubin (sm_90's includes the 1 KB the system reserves)
    local_bytes: int  # local memory per thread outside the stack frame
    stack_bytes: int  # per thread: spills and local arrays
    mix: InstructionMix
    instructions: tuple[Instruction, ...]

    def by_line(self) -> list[tuple[int | None, tuple[Instruction, ...]]]:
        """Runs of consecutive instructions from the same CUDA line, in address order."""
        groups: list[tuple[int | None, list[Instruction]]] = []
        for ins in self.instructions:
            if ins.opcode in _PADDING and groups:
                continue
            if not groups or groups[-1][0] != ins.line:
                groups.append((ins.line, []))
            groups[-1][1].append(ins)
        return [(line, tuple(run)) for line, run in groups]


@dataclass(frozen=True)
class SassReport:
    arch: str
    kernels: tuple[KernelSass, ...]
    tools: tuple[str, ...]  # the compiler and the disassembler, for the caption

    def to_dict(self) -> dict:
        data = asdict(self)
        for kernel, k in zip(data["kernels"], self.kernels, strict=True):
            kernel["mix"]["spill_bytes"] = k.mix.spill_bytes
            for ins, i in zip(kernel["instructions"], k.instructions, strict=True):
                ins["text"] = i.text
        return data


# -- parsing -------------------------------------------------------------------------

_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_LINE_INFO = re.compile(r'//## File "[^"]*", line (\d+)')
_LABEL = re.compile(r"^(\.L\w+):")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;")


def parse_sass(text: str) -> dict[str, tuple[Instruction, ...]]:
    """Kernel name -> its instructions, each with the CUDA line of the last line-info
    comment before it (``nvdisasm -g``)."""
    kernels: dict[str, list[Instruction]] = {}
    current, line, label = None, None, ""
    for raw in text.splitlines():
        section = _SECTION.match(raw)
        if section:
            current, line, label = section.group(1), None, ""
            kernels[current] = []
            continue
        if current is None:
            continue
        info = _LINE_INFO.search(raw)
        if info:
            line = int(info.group(1))
            continue
        named = _LABEL.match(raw.strip())
        if named:
            label = named.group(1)
            continue
        found = _INSTRUCTION.search(raw)
        if found:
            address, predicate, opcode, operands = found.groups()
            kernels[current].append(Instruction(int(address, 16), (predicate or "").strip(), opcode, operands,
                                                line, label))
            label = ""
    return {name: tuple(instructions) for name, instructions in kernels.items()}


@functools.lru_cache(maxsize=64)
def analyze_source(cuda: str, arch: str) -> SassReport:
    """The SASS report of a CUDA source compiled for ``arch``."""
    reason = missing_tools()
    if reason:
        raise ExplorerError(reason)
    sass, usage_text = disassemble(compile_cubin(cuda, arch))
    usage = parse_resource_usage(usage_text)
    kernels = []
    for name, instructions in parse_sass(sass).items():
        used = usage.get(name, {})
        kernels.append(KernelSass(
            kernel=name, registers=used.get("REG", 0), shared_bytes=used.get("SHARED", 0),
            local_bytes=used.get("LOCAL", 0), stack_bytes=used.get("STACK", 0),
            mix=instruction_mix(instructions), instructions=instructions,
        ))
    return SassReport(arch, tuple(kernels), ("NVRTC -lineinfo", "nvdisasm -g", "cuobjdump --dump-resource-usage"))


def analyze_sass(built) -> SassReport:
    """The SASS report of a build's CUDA for its target architecture."""
    if not built.cuda:
        raise ExplorerError("A CPU build has no CUDA kernels to disassemble.")
    return analyze_source(built.cuda, str(built.target.arch))


def binary_compiler() -> str | None:
    """What :func:`compile_binary` compiles with on this machine: "nvrtc" (NVRTC and the pip
    disassembler, no toolkit needed), else "nvcc" (a toolkit's), else None."""
    if not missing_tools():
        return "nvrtc"
    return "nvcc" if nvcc_path() is not None else None


def compile_binary(built) -> Binary | None:
    """Registers, shared memory and spills per kernel of a build, from the cubin that NVRTC
    compiles (no toolkit needed); nvcc -Xptxas -v where NVRTC or the pip disassembler is
    missing; None when neither is there (:func:`binary_compiler`)."""
    compiler = binary_compiler() if built.cuda else None
    if compiler is None:
        return None
    if compiler == "nvrtc":
        report = analyze_sass(built)
        return Binary(
            "nvrtc", report.arch, {k.kernel: k.registers for k in report.kernels},
            {k.kernel: k.shared_bytes for k in report.kernels}, {k.kernel: k.mix.spill_bytes for k in report.kernels},
            " ".join(report.tools), "\n\n".join(sass_text(k, built.cuda) for k in report.kernels),
        )
    return nvcc_binary(built.cuda, built.target.arch)


# -- text ----------------------------------------------------------------------------


def mix_summary(mix: InstructionMix) -> str:
    """One line of the non-zero counts, e.g. ``FFMA 72, LDS.64 18, BAR 1, branches 3``."""
    return ", ".join(f"{label} {n}" for label, n in mix.rows() if n and label != "instructions")


def sass_text(kernel: KernelSass, cuda: str, order: str = "address") -> str:
    """The kernel's SASS under the CUDA lines that produced it: ``// 93: <CUDA line>``, then
    its instructions. ``order="address"`` keeps the program order (a line's instructions
    come back wherever the scheduler interleaved them); ``"line"`` gathers each line's
    instructions under it once, in source order. No addresses, so that two versions diff
    by what changed."""
    source = cuda.splitlines()
    runs = kernel.by_line()
    if order == "line":
        gathered: dict[int | None, list[Instruction]] = {}
        for line, run in runs:
            gathered.setdefault(line, []).extend(run)
        runs = sorted(gathered.items(), key=lambda item: (item[0] is None, item[0] or 0))
    out = []
    for line, run in runs:
        if line is not None and 0 < line <= len(source):
            text = source[line - 1].strip()
            out.append(f"// {line}: {text if len(text) <= SOURCE_WIDTH else text[:SOURCE_WIDTH - 1] + '…'}")
        else:
            out.append("// (no source line)")
        out += [f"{ins.label + ':' if ins.label else '':<10}{ins.text}" for ins in run]
    return "\n".join(out)


def resources_line(kernel: KernelSass, dynamic_shared_bytes: int = 0) -> str:
    """A kernel's registers, shared memory (the cubin's, and the dynamic part it is launched with), stack,
    spills and instructions, in one line."""
    dynamic = f" + {dynamic_shared_bytes:,} B dynamic" if dynamic_shared_bytes else ""
    return (f"{kernel.registers} registers/thread, {kernel.shared_bytes:,} B shared{dynamic}, "
            f"{kernel.stack_bytes:,} B stack frame, {kernel.mix.spill_bytes:,} B spilled (local loads and stores), "
            f"{kernel.mix.instructions:,} instructions")


def dynamic_shared(built) -> dict[str, int]:
    """The dynamic shared memory each kernel of a build is launched with, by kernel name."""
    return {k.name: k.dynamic_shared_bytes for k in built.kernels}


def format_sass(report: SassReport, built) -> str:
    cuda, dynamic = built.cuda, dynamic_shared(built)
    parts = []
    for k in report.kernels:
        parts.append(f"kernel {k.kernel} ({report.arch}): {resources_line(k, dynamic.get(k.kernel, 0))}")
        parts.append(f"  mix: {mix_summary(k.mix)}")
        parts.append(sass_text(k, cuda))
        parts.append("")
    parts.append(f"note: {SHARED_NOTE}")
    return "\n".join(parts)
