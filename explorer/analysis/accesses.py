"""Shared-memory accesses of a lowered device kernel, with everything needed to evaluate
their addresses: the launch (thread and block variables with extents), the enclosing
loops, the guards that decide whether a lane takes part, and let-bound variables.

Works on ``Build.device_mod`` (TIR just before code generation): buffers are flattened
to 1-D and virtual threads are already expanded into separate statements, so each
``BufferStore``/``BufferLoad`` on a shared buffer is one warp-wide instruction of the
kernel (before the CUDA compiler's own optimisations, which the bank model discusses).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import tvm
from tvm import tirx
from tvm_ffi import StructuralKey

from ..build import LaunchShape
from ..tir_walk import children, walk
from .texpr import BufferLoad, expr_children, op_name

SHARED_SCOPES = ("shared", "shared.dyn")
GLOBAL_SCOPES = ("global",)
AXES = "xyz"
# Calls that access shared memory at an address they are given: op name → (access, argument position of
# the address). ldmatrix.x4: each lane gives the address of one 16-byte row; cp.async (16-byte copies)
# writes its destination.
SHARED_ADDRESS_CALLS = {"tirx.ptx.ldmatrix": ("load", 4), "tirx.ptx.cp_async_cg": ("store", 0),
                        "tirx.ptx.cp_async_ca": ("store", 0)}
LANE_BYTES = 16
# ptx.st (TIRx's st.global.b32, st.global.v2.f32): a store at the address of its first argument, of the width
# its type and vector words name.
PTX_STORES = ("tirx.ptx.st", "tirx.ptx.st_vec")
_PTX_TYPE = re.compile(r"[bfsu](8|16|32|64)")
_PTX_VECTOR = re.compile(r"v(2|4|8)")


def ptx_store_bytes(call) -> int:
    """Bytes one lane stores with a ``ptx.st`` call: its type's bits × its vector length, over 8."""
    words = [str(a.value) for a in call.args if isinstance(getattr(a, "value", None), str)]
    bits = next((int(m.group(1)) for w in words if (m := _PTX_TYPE.fullmatch(w))), 32)
    vector = next((int(m.group(1)) for w in words if (m := _PTX_VECTOR.fullmatch(w))), 1)
    return bits * vector // 8


# Barriers: every thread of the block waits for every other ("block"), or the lanes of a warp for one another
# ("warp", __syncwarp). tvm_storage_sync's argument names the memory: "warp" is __syncwarp.
EXTERN_BARRIERS = {"__syncthreads": "block", "__syncwarp": "warp"}
TIRX_BARRIERS = {"cta_sync": "block", "warp_sync": "warp"}  # TIRx's own (T.cuda.cta_sync())


def _addressed(address):
    """The element an address expression points at (``cvta(address_of(buf[i]))``), or None."""
    while isinstance(address, tvm.ir.Call) and str(address.op.name) in ("tirx.cuda.cvta_generic_to_shared",
                                                                       "tirx.address_of"):
        address = address.args[0]
    return address if isinstance(address, BufferLoad) else None


@dataclass(frozen=True)
class Loop:
    var: tirx.Var
    min: int
    extent: int
    height: int = 1  # 1 for a loop with no loop inside, 2 around those, ... (unrolling goes by height)

    @property
    def name(self) -> str:
        return str(self.var.name)


@dataclass(frozen=True)
class Launch(LaunchShape):
    """A kernel's launch configuration and the variables that carry its indices."""

    kernel: str
    thread_vars: dict  # "x"/"y"/"z" -> Var of threadIdx
    block_vars: dict  # "x"/"y"/"z" -> Var of blockIdx
    block: tuple[int, int, int]
    grid: tuple[int, int, int]

    def block_loops(self) -> list[Loop]:
        """blockIdx variables as loops (x, y, z), for enumeration."""
        return [Loop(self.block_vars[a], 0, self.grid[i]) for i, a in enumerate(AXES) if a in self.block_vars]


@dataclass(frozen=True)
class SharedAccess:
    """One load or store of a shared buffer in the lowered kernel."""

    number: int  # program order within the kernel, from 1
    kernel: str
    buffer: str
    op: str  # "load" | "store"
    index: object  # flattened element index (the base for a vector access)
    lanes: int  # elements per thread (a TVM-vectorized access has 2 or 4)
    element_bytes: int
    loops: tuple[Loop, ...]
    guards: tuple[tuple[object, bool], ...]  # (condition, must be true?)
    text: str
    duplicate_of: int | None = None  # an identical earlier load the compiler reuses
    epoch: int = 0  # barriers (tvm_storage_sync) before it in program order
    # For the race check (explorer.analysis.races): the shared allocation it touches (index into
    # KernelAccesses.storages, -1 when not found), the block and warp barriers a thread has passed when it
    # makes the access in the first iteration of every loop (KernelAccesses.phase_strides adds the rest), and
    # its place among the kernel's accesses and async copies (program order), and the statement it is in
    # (counted in program order: the CUDA writes a statement on a line, or on a few).
    storage: int = -1
    phase: int = 0
    warp_phase: int = 0
    order: int = 0
    statement: int = 0

    @property
    def access_bytes(self) -> int:
        return self.lanes * self.element_bytes


@dataclass
class KernelAccesses:
    launch: Launch
    accesses: list[SharedAccess]
    # let-bound Var -> expression; the buffer of a register written once -> the value (texpr.compile_expr)
    bindings: dict = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)  # why some accesses were skipped
    barrier_loops: set = field(default_factory=set)  # loop variables whose body has a barrier
    # For the race check: loop variable -> (block barriers, warp barriers) one iteration of its body passes
    # (loops with none are left out); the shared allocations in program order; the cp.async copies
    # (cp_async_raw), which write shared memory but are not among the bank model's accesses; why the
    # barriers cannot be counted (a barrier under a condition, mbarriers); and, by storage, the calls its
    # address is handed to that read or write it unseen (TVM's legacy ldmatrix).
    phase_strides: dict = field(default_factory=dict)
    storages: list[Storage] = field(default_factory=list)
    copies: list[SharedAccess] = field(default_factory=list)
    unordered: list[str] = field(default_factory=list)
    handed: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Storage:
    """One shared-memory allocation of a kernel (views of it, as the dynamic shared memory's, share it)."""

    name: str
    scope: str
    volatile: bool  # TVM's "tirx.volatile" annotation: CUDA reads and writes it through a volatile pointer


def barrier_kind(call) -> str | None:
    """"block" for a __syncthreads(), "warp" for a __syncwarp(), None for any other call."""
    name = op_name(call)
    if name == "tvm_storage_sync":
        scope = call.args[0].value if call.args and isinstance(call.args[0], tvm.ir.expr.StringImm) else "shared"
        return "warp" if scope == "warp" else "block"
    if name in TIRX_BARRIERS:
        return TIRX_BARRIERS[name]
    if name in ("call_extern", "call_pure_extern") and call.args and isinstance(call.args[0], tvm.ir.expr.StringImm):
        return EXTERN_BARRIERS.get(call.args[0].value)
    return None


def _barriers_in(stmt) -> bool:
    """Whether ``stmt`` holds a block barrier."""
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call):
        return barrier_kind(stmt.value) == "block"
    return any(_barriers_in(c) for c in children(stmt))


def kernel_accesses(device_mod: tvm.IRModule, scopes: tuple[str, ...] = SHARED_SCOPES) -> list[KernelAccesses]:
    """The accesses of buffers in ``scopes`` (shared memory by default) of every kernel of a
    lowered device module, by kernel name."""
    out = []
    for gv, func in sorted(device_mod.functions.items(), key=lambda item: item[0].name_hint):
        collector = _Collector(gv.name_hint, loop_heights(func.body), scopes, registers_written_once(func.body))
        collector.stmt(func.body, (), ())
        out.append(collector.result())
    return out


def registers_written_once(body) -> set:
    """The one-element local buffers that one store writes in the whole kernel: the
    names a kernel written in TVMScript gives a value (``group = tx // G`` lowers to ``group[0] = …``)."""
    stores: dict = {}
    for s, _ in walk(body):
        if isinstance(s, tirx.BufferStore) and s.buffer.scope() == "local" and \
                [int(d) if isinstance(d, tirx.IntImm) else None for d in s.buffer.shape] == [1]:
            stores[s.buffer] = stores.get(s.buffer, 0) + 1
    return {buffer for buffer, n in stores.items() if n == 1}


@functools.lru_cache(maxsize=64)
def shared_accesses(built) -> tuple[KernelAccesses, ...]:
    """:func:`kernel_accesses` of a build's device module (shared memory), once per build: the bank
    model, the race check and the diagnosis's facts read the same."""
    return tuple(kernel_accesses(built.device_mod))


@functools.lru_cache(maxsize=64)
def global_accesses(built) -> tuple[KernelAccesses, ...]:
    """:func:`kernel_accesses` of a build's device module (global memory), once per build: the
    coalescing model, the written kernels' tiling and the diagnosis's facts read the same (a
    diagnosis walked each neighbour's twice)."""
    return tuple(kernel_accesses(built.device_mod, GLOBAL_SCOPES))


def loop_heights(body) -> dict:
    """Loop variable → height of its For (1 + the tallest For nested inside it)."""
    heights: dict = {}

    def visit(s) -> int:
        inner = max((visit(c) for c in children(s)), default=0)
        if isinstance(s, tirx.For):
            heights[s.loop_var] = inner + 1
            return inner + 1
        return inner

    visit(body)
    return heights


class _Collector:
    def __init__(self, kernel: str, heights: dict, scopes: tuple[str, ...] = SHARED_SCOPES,
                 registers: set | None = None):
        self.kernel = kernel
        self.scopes = scopes
        self.registers = registers or set()  # written once: their value stands for them (registers_written_once)
        self.heights = heights
        self.epoch = 0
        self.barrier_loops: set = set()
        self.phase = 0  # block barriers passed so far (a loop's counted for all its iterations once it ends)
        self.warp_phase = 0  # block and warp barriers passed
        self.phase_strides: dict = {}
        self.storages: list[Storage] = []
        self.storage_of: dict = {}  # Buffer (an allocation or a view of one) -> index into storages
        self.copies: list[SharedAccess] = []
        self.unordered: list[str] = []
        self.handed: dict = {}  # storage -> names of the calls its address is handed to
        self.statement = 0
        self.threads: dict = {}
        self.blocks: dict = {}
        self.extents: dict = {}
        self.bindings: dict = {}
        self.accesses: list[SharedAccess] = []
        self.unsupported: list[str] = []
        # Loads already made in the current straight-line region: the CUDA compiler
        # reuses their value for an identical load (same buffer, index, loops, guards)
        # until the region ends (a loop boundary, a branch, a barrier or a store to it).
        self.region: dict = {}

    def result(self) -> KernelAccesses:
        dims = lambda kind: tuple(self.extents.get(f"{kind}.{a}", 1) for a in AXES)  # noqa: E731
        launch = Launch(self.kernel, dict(self.threads), dict(self.blocks), dims("threadIdx"), dims("blockIdx"))
        return KernelAccesses(launch, self.accesses, self.bindings, self.unsupported, self.barrier_loops,
                              self.phase_strides, self.storages, self.copies, self.unordered, self.handed)

    # -- statements ------------------------------------------------------------------
    def stmt(self, s, loops: tuple, guards: tuple) -> None:
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            tag = str(s.node.thread_tag)
            kind, _, axis = tag.partition(".")
            self.extents[tag] = int(s.value)
            if kind == "threadIdx":
                self.threads[axis] = s.node.var
            elif kind == "blockIdx":
                self.blocks[axis] = s.node.var
            self.stmt(s.body, loops, guards)
        elif isinstance(s, tirx.For):
            if not isinstance(s.min, tirx.IntImm) or not isinstance(s.extent, tirx.IntImm) or (
                s.step is not None and not (isinstance(s.step, tirx.IntImm) and int(s.step) == 1)
            ):
                self.unsupported.append(f"loop '{s.loop_var.name}' has a non-constant range")
                if _barriers_in(s.body):  # taken to run at least once: what follows it is past a barrier
                    self.phase += 1
                    self.warp_phase += 1
                return
            self.region = {}
            loop = Loop(s.loop_var, int(s.min), int(s.extent), self.heights.get(s.loop_var, 1))
            phase, warp_phase = self.phase, self.warp_phase
            self.stmt(s.body, loops + (loop,), guards)
            stride = (self.phase - phase, self.warp_phase - warp_phase)
            if any(stride):
                self.phase_strides[s.loop_var] = stride
                self.phase, self.warp_phase = phase + stride[0] * loop.extent, warp_phase + stride[1] * loop.extent
            self.region = {}
        elif isinstance(s, tirx.IfThenElse):
            self.statement += 1
            self.expr(s.condition, loops, guards)
            self.region = {}
            self.stmt(s.then_case, loops, guards + ((s.condition, True),))
            self.region = {}
            if s.else_case is not None:
                self.stmt(s.else_case, loops, guards + ((s.condition, False),))
                self.region = {}
        elif isinstance(s, tirx.Bind):
            self.statement += 1
            self.bindings[s.var] = s.value
            self.expr(s.value, loops, guards)
        elif isinstance(s, tirx.BufferStore):
            self.statement += 1
            self.expr(s.value, loops, guards)
            for index in s.indices:
                self.expr(index, loops, guards)
            if s.buffer in self.registers and not loops and not guards:
                self.bindings[s.buffer] = s.value
            if s.buffer.scope() in self.scopes:
                self.record("store", s.buffer, s.indices, loops, guards)
                self.region = {k: v for k, v in self.region.items() if k[0] != str(s.buffer.name)}
        elif isinstance(s, tirx.Evaluate):
            self.statement += 1
            self.expr(s.value, loops, guards)
            if isinstance(s.value, tvm.ir.Call) and op_name(s.value) == "tvm_storage_sync":
                self.region = {}
                self.epoch += 1
                self.barrier_loops.update(l.var for l in loops)
            kind = barrier_kind(s.value) if isinstance(s.value, tvm.ir.Call) else None
            if kind == "block":
                self.phase += 1
                if guards:
                    self._unordered("a __syncthreads() under a condition, which not every thread may reach")
            if kind is not None:
                self.warp_phase += 1
        elif isinstance(s, tirx.AllocBuffer):
            if s.buffer.scope() in SHARED_SCOPES:
                self.storage_of[s.buffer] = len(self.storages)
                self.storages.append(Storage(str(s.buffer.name), s.buffer.scope(),
                                             bool(s.annotations.get("tirx.volatile", False))))
            for child in children(s):
                self.stmt(child, loops, guards)
        elif isinstance(s, tirx.DeclBuffer):
            data = s.data  # buffer_data(allocation) for a view of a shared allocation
            if isinstance(data, tvm.ir.Call) and data.args and data.args[0] in self.storage_of:
                self.storage_of[s.buffer] = self.storage_of[data.args[0]]
            for child in children(s):
                self.stmt(child, loops, guards)
        else:
            for child in children(s):
                self.stmt(child, loops, guards)

    # -- expressions -----------------------------------------------------------------
    def _unordered(self, why: str) -> None:
        if why not in self.unordered:
            self.unordered.append(why)

    def expr(self, e, loops: tuple, guards: tuple) -> None:
        if isinstance(e, BufferLoad):
            for index in e.indices:
                self.expr(index, loops, guards)
            if e.source.scope() in self.scopes:
                self.record("load", e.source, e.indices, loops, guards)
            return
        if isinstance(e, tvm.ir.Call) and str(e.op.name) in PTX_STORES:
            target = _addressed(e.args[0])
            for arg in e.args[1:]:
                self.expr(arg, loops, guards)
            if target is None or target.source.scope() not in self.scopes:
                self.expr(e.args[0], loops, guards)
                return
            for index in target.indices:
                self.expr(index, loops, guards)
            element_bytes = max(1, tvm.DataType(str(target.source.dtype)).bits // 8)
            self.record("store", target.source, target.indices, loops, guards,
                        lanes=max(1, ptx_store_bytes(e) // element_bytes))
            return
        if isinstance(e, tvm.ir.Call) and str(e.op.name) in SHARED_ADDRESS_CALLS:
            # ldmatrix reads, and cp.async writes, 16 bytes a lane at the address the lane gives: to
            # the bank model a 16-byte vector access (8 lanes a phase: for ldmatrix, one 8 × 8 matrix).
            op, position = SHARED_ADDRESS_CALLS[str(e.op.name)]
            target = _addressed(e.args[position])
            for i, arg in enumerate(e.args):
                if i != position:
                    self.expr(arg, loops, guards)
            if target is None or target.source.scope() not in self.scopes:
                self.expr(e.args[position], loops, guards)
                return
            for index in target.indices:
                self.expr(index, loops, guards)
            element_bytes = max(1, tvm.DataType(str(target.source.dtype)).bits // 8)
            self.record(op, target.source, target.indices, loops, guards, lanes=LANE_BYTES // element_bytes)
            return
        name = op_name(e) if isinstance(e, tvm.ir.Call) else ""
        if "mbarrier" in name:
            self._unordered("mbarriers (TMA copies, wgmma), whose waits order shared memory between the threads "
                            "that arrive and those that wait")
        if name == "cp_async_raw":  # (dst, offset, src, offset, bytes): a write of shared memory
            self._copy(e, loops, guards)
            for arg in e.args[1:]:
                self.expr(arg, loops, guards)
            return
        if name == "address_of":  # an address, not an access
            for index in e.args[0].indices if isinstance(e.args[0], BufferLoad) else ():
                self.expr(index, loops, guards)
            return
        if name and name not in ("buffer_data", "if_then_else"):
            self._handed(e, name)
        if isinstance(e, tvm.ir.Call) and op_name(e) == "if_then_else":
            cond, then, other = e.args
            self.expr(cond, loops, guards)
            self.expr(then, loops, guards + ((cond, True),))
            self.expr(other, loops, guards + ((cond, False),))
            return
        if isinstance(e, tirx.And):  # C's && does not evaluate b when a is false
            self.expr(e.a, loops, guards)
            self.expr(e.b, loops, guards + ((e.a, True),))
            return
        if isinstance(e, tirx.Or):
            self.expr(e.a, loops, guards)
            self.expr(e.b, loops, guards + ((e.a, False),))
            return
        for child in expr_children(e):
            self.expr(child, loops, guards)

    def _handed(self, call, name: str) -> None:
        """Note the shared allocations whose address ``call`` takes: it reads or writes them in ways the
        accesses here do not show (TVM's legacy ldmatrix, a tensor-core fragment's load)."""
        for arg in call.args:
            target = _addressed(arg)
            buffer = target.source if target is not None else (
                arg.args[0] if isinstance(arg, tvm.ir.Call) and op_name(arg) == "buffer_data" and arg.args else None)
            if buffer is not None and buffer in self.storage_of:
                self.handed.setdefault(self.storage_of[buffer], set()).add(name)

    def _copy(self, call, loops: tuple, guards: tuple) -> None:
        """A cp.async copy into shared memory: written at the address it is given (the race check's)."""
        dst, offset, size = call.args[0], call.args[1], call.args[4]
        buffer = dst.args[0] if isinstance(dst, tvm.ir.Call) and dst.args else None
        if buffer is None or buffer not in self.storage_of or not isinstance(size, tirx.IntImm):
            return
        element_bytes = max(1, tvm.DataType(str(call.ty)).bits // 8)
        lanes = max(1, int(size.value) // element_bytes)
        order = len(self.accesses) + len(self.copies)
        self.copies.append(SharedAccess(len(self.copies) + 1, self.kernel, str(buffer.name), "copy", offset, lanes,
                                        element_bytes, loops, guards, f"cp.async {buffer.name}[{offset}]",
                                        epoch=self.epoch, storage=self.storage_of[buffer], phase=self.phase,
                                        warp_phase=self.warp_phase, order=order, statement=self.statement))

    def record(self, op: str, buffer, indices, loops: tuple, guards: tuple, lanes: int | None = None) -> None:
        index, vector_lanes = _flat_index(buffer, indices)
        lanes = lanes or vector_lanes
        if index is None:
            self.unsupported.append(f"a strided vector {op} of {buffer.name}")
            return
        element_bytes = max(1, tvm.DataType(str(buffer.dtype)).bits // 8)
        text = f"{buffer.name}[{', '.join(str(i) for i in indices)}]"
        duplicate_of = None
        if op == "load":
            key = (str(buffer.name), StructuralKey(index), lanes, tuple(l.var for l in loops), guard_key(guards))
            duplicate_of = self.region.get(key)
            if duplicate_of is None:
                self.region[key] = len(self.accesses) + 1
        self.accesses.append(
            SharedAccess(len(self.accesses) + 1, self.kernel, str(buffer.name), op, index, lanes, element_bytes,
                         loops, guards, text, duplicate_of, self.epoch, self.storage_of.get(buffer, -1), self.phase,
                         self.warp_phase, len(self.accesses) + len(self.copies), self.statement)
        )


def guard_key(guards: tuple) -> tuple:
    """Guards as a dict key, compared by structure (cheaper than printing them)."""
    return tuple((StructuralKey(cond), want) for cond, want in guards)


def _flat_index(buffer, indices) -> tuple[object, int]:
    """(scalar element index, elements per thread). Lowered buffers are 1-D; a vector
    access indexes with a Ramp (base, stride 1, lanes)."""
    if len(indices) == 1:
        index = indices[0]
    else:  # row-major flattening, for a multi-dimensional buffer left unflattened
        index = indices[0]
        for dim, i in zip(list(buffer.shape)[1:], list(indices)[1:], strict=False):
            index = index * dim + i
    if isinstance(index, tirx.Ramp):
        if isinstance(index.stride, tirx.IntImm) and int(index.stride) == 1:
            return index.base, int(index.lanes)
        return None, int(index.lanes)  # a strided vector: a gather the model does not cover
    if isinstance(index, tirx.Broadcast):
        return index.value, 1
    return index, 1
