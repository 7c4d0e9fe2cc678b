"""The bank model of the shared-memory instructions nvcc emits, not of the TIR's accesses.

The CUDA compiler changes what Nsight Compute counts in ways the lowered TIR does not
show. It unrolls small loops fully and larger ones partially (2 or 4 copies of the body
per iteration); in the unrolled code it loads an address once when several copies read
it (the 3×3 filter taps of neighbouring outputs overlap); it hoists a load out of a loop
whose iterations all read the same address (loop-invariant code motion); and it merges
loads or stores of consecutive, aligned 4-byte elements into one 64- or 128-bit
instruction (``ld.shared.v2``/``.v4``), which shared memory serves in 2 or 4 phases.

``compiled_instructions(kernel, plan)`` rebuilds the instruction list for an unrolling
plan: per loop nest, loops up to some height fully unrolled (height 1 = innermost) and
the next level unrolled by a factor. Two copies are one instruction when they give the
same address to every thread of the block for a few samples of the outer loops; copies
form a vector when their addresses are +0, +1 (, +2, +3) elements from a base aligned to
the vector in all of those samples, and no guard puts them in separate branches.
``choose_plan`` picks the plan whose static instruction counts come closest to nvcc's
PTX (:func:`explorer.analysis.ncu.shared_instructions`), and :func:`analyze_compiled`
gives the bank report of the chosen instruction list.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np
from tvm import tirx

from .accesses import KernelAccesses, Loop, SharedAccess
from .banks import ROW_BUDGET, BankReport, BankTotals, KernelBanks, analyze_access, thread_ids
from .texpr import Unsupported, compile_expr, free_vars

PROBE_SAMPLES = 4  # outer-loop/block samples (the first is every loop at its start)
PROBE_SEED = 1
VECTOR_WIDTHS = (4, 2)  # elements of 4 bytes: 128- and 64-bit accesses
PARTIAL_FACTORS = (1, 2, 4)


@dataclass(frozen=True)
class Unroll:
    """How one loop nest is unrolled."""

    height: int = 0  # loops of height ≤ this are fully unrolled
    factor: int = 1  # loops of height ``height + 1`` get this many body copies per iteration


@dataclass(frozen=True)
class Instruction:
    access: SharedAccess  # the first copy
    fixed: tuple  # ((loop var, value or expression), ...) substituted into its index
    loops: tuple  # the loops it runs in (after unrolling and hoisting)
    guards: tuple  # its guards, including partial-unroll remainder checks
    width: int  # elements per thread from merging (1, 2 or 4)
    copies: int  # TIR access copies it stands for

    @property
    def kind(self) -> tuple[str, int]:
        return ("ld" if self.access.op == "load" else "st", self.width * self.access.lanes)


def nest_of(access: SharedAccess) -> str:
    """The outermost serial loop around an access ("" outside loops): unrolling is planned per nest."""
    return access.loops[0].name if access.loops else ""


def compiled_instructions(kernel: KernelAccesses, plan: dict) -> list[Instruction]:
    """Shared instructions of ``kernel`` under ``plan`` ({nest: Unroll}, default: nothing
    unrolled): unrolled copies, repeated loads merged, consecutive accesses vectorised,
    loop-invariant loads hoisted."""
    probe = _Probe(kernel)
    regions: dict[tuple, list] = {}
    split_vars: dict = {}  # one group counter per partially unrolled loop, shared by its accesses
    for access in kernel.accesses:
        unroll = plan.get(nest_of(access), Unroll())
        for fixed, loops, guards in _copies(access, unroll, split_vars):
            key = (access.op, access.epoch, tuple(str(l.var) for l in loops))
            regions.setdefault(key, []).append((access, fixed, loops, guards))
    out = []
    for copies in regions.values():
        out.extend(_region_instructions(copies, probe))
    return [_hoist(i, kernel) for i in out]


def _copies(access: SharedAccess, unroll: Unroll, split_vars: dict):
    """Each unrolled copy of ``access``: (substitutions, remaining loops, guards).
    ``split_vars`` maps a partially unrolled loop to the variable counting its groups."""
    full = [l for l in access.loops if l.height <= unroll.height]
    remaining, partial = [], []
    for l in access.loops:
        if l.height == unroll.height + 1 and unroll.factor > 1 and l.extent > unroll.factor:
            if l.var not in split_vars:
                split_vars[l.var] = tirx.Var(f"{l.name}_o", "int32")
            outer = split_vars[l.var]
            remaining.append(Loop(outer, 0, -(-l.extent // unroll.factor), l.height))
            partial.append((l, outer))
        elif l.height > unroll.height:
            remaining.append(l)
    choices = [[(l.var, l.min + v) for v in range(l.extent)] for l in full]
    choices += [[(l.var, outer * unroll.factor + (l.min + k)) for k in range(unroll.factor)] for l, outer in partial]
    for fixed in itertools.product(*choices):
        guards = access.guards
        for (l, _outer), (_, value) in zip(partial, fixed[len(full):], strict=False):
            if l.extent % unroll.factor:  # the last group runs past the loop's end
                guards = guards + ((value < l.min + l.extent, True),)
        yield tuple(fixed), tuple(remaining), guards


def _bindings(kernel: KernelAccesses, fixed: tuple) -> dict:
    return {**kernel.bindings, **{var: (tirx.const(v, "int32") if isinstance(v, int) else v) for var, v in fixed}}


class _Probe:
    """Addresses of a copy for every thread of one block and a few outer-loop samples."""

    def __init__(self, kernel: KernelAccesses):
        self.kernel = kernel
        launch = kernel.launch
        ids = thread_ids(launch, np.arange(launch.warps_per_block))
        self.valid = ids["valid"].reshape(1, -1)
        self.env = {var: ids[axis].reshape(1, -1) for axis, var in launch.thread_vars.items()}
        self.rng = np.random.default_rng(PROBE_SEED)
        self.samples: dict = {}

    def sample(self, loop: Loop) -> np.ndarray:
        if loop.var not in self.samples:  # the same samples for every copy in the kernel
            random = self.rng.integers(0, loop.extent, PROBE_SAMPLES - 1)
            self.samples[loop.var] = (np.concatenate([[0], random]) + loop.min).reshape(-1, 1)
        return self.samples[loop.var]

    def evaluate(self, access: SharedAccess, fixed: tuple, loops: tuple, guards: tuple):
        bindings = _bindings(self.kernel, fixed)
        env = dict(self.env)
        for loop in (*loops, *self.kernel.launch.block_loops()):
            env[loop.var] = self.sample(loop)
        shape = (PROBE_SAMPLES, self.valid.shape[1])
        active = np.broadcast_to(self.valid, shape)
        for cond, want in guards:
            holds = np.asarray(compile_expr(cond, bindings)(env)).astype(bool)
            active = active & (holds if want else ~holds)
        index = np.broadcast_to(np.asarray(compile_expr(access.index, bindings)(env)).astype(np.int64), shape)
        return np.where(active, index, -1), np.broadcast_to(active, shape)


def _region_instructions(copies: list, probe: _Probe) -> list[Instruction]:
    # Evaluate every copy; loads with the same addresses everywhere are one instruction.
    unique: dict = {}
    for access, fixed, loops, guards in copies:
        if access.duplicate_of:
            continue  # the TIR itself repeats an earlier load of this body
        try:
            address, active = probe.evaluate(access, fixed, loops, guards)
        except Unsupported:
            address = active = None
        if access.op == "load" and address is not None:
            key = (access.buffer, address.tobytes(), active.tobytes())
        else:
            key = (access.number, fixed)
        if key in unique:
            unique[key]["copies"] += 1
        else:
            unique[key] = {"access": access, "fixed": fixed, "loops": loops, "guards": guards,
                           "address": address, "active": active, "copies": 1}
    entries = list(unique.values())
    lookup = {(e["access"].buffer, e["access"].op, e["address"].tobytes(), e["active"].tobytes()): i
              for i, e in enumerate(entries) if e["address"] is not None}
    used = [False] * len(entries)
    out = []
    for width in VECTOR_WIDTHS:
        for i, e in enumerate(entries):
            if used[i] or not _can_merge(e) or not e["active"].any() or (e["address"][e["active"]] % width).any():
                continue
            members = [lookup.get((e["access"].buffer, e["access"].op,
                                   np.where(e["active"], e["address"] + k, -1).tobytes(), e["active"].tobytes()))
                       for k in range(1, width)]
            if any(m is None or used[m] or not _can_merge(entries[m]) for m in members):
                continue
            for m in (i, *members):
                used[m] = True
            out.append(Instruction(e["access"], e["fixed"], e["loops"], e["guards"], width,
                                   e["copies"] + sum(entries[m]["copies"] for m in members)))
    for i, e in enumerate(entries):
        if not used[i]:
            out.append(Instruction(e["access"], e["fixed"], e["loops"], e["guards"], 1, e["copies"]))
    return out


def _can_merge(entry: dict) -> bool:
    # 4-byte scalar accesses outside branches (each guarded copy is its own basic block).
    access = entry["access"]
    return entry["address"] is not None and access.lanes == 1 and access.element_bytes == 4 and not entry["guards"]


def _hoist(ins: Instruction, kernel: KernelAccesses) -> Instruction:
    """Loop-invariant code motion: a load whose address and guards do not change inside
    a loop without barriers or stores to its buffer runs once before that loop."""
    if ins.access.op != "load":
        return ins
    bindings = _bindings(kernel, ins.fixed)
    used = free_vars(ins.access.index, bindings)
    for cond, _ in ins.guards:
        used |= free_vars(cond, bindings)
    stored = {l.var for a in kernel.accesses if a.op == "store" and a.buffer == ins.access.buffer for l in a.loops}
    keep = []
    for depth, loop in enumerate(ins.loops):
        invariant = all(l.var not in used for l in ins.loops[depth:])
        if invariant and loop.var not in kernel.barrier_loops and loop.var not in stored:
            break  # this loop and every loop inside it leave the address unchanged
        keep.append(loop)
    return dataclasses.replace(ins, loops=tuple(keep))


def static_counts(instructions: list[Instruction]) -> Counter:
    """{("ld", 4): n, ("st", 1): m, ...}: instructions by op and elements per thread."""
    return Counter(i.kind for i in instructions)


def ptx_kinds(counts: dict) -> Counter:
    """``{"ld.v4.f32": 2, "ld.f32": 3}`` (PTX kinds) → ``{("ld", 4): 2, ("ld", 1): 3}``."""
    out: Counter = Counter()
    for kind, n in counts.items():
        parts = kind.split(".")
        width = int(parts[1][1:]) if len(parts) == 3 else 1
        out[(parts[0], width)] += n
    return out


def _options(kernel: KernelAccesses, nest: str) -> list[Unroll]:
    heights = sorted({l.height for a in kernel.accesses if nest_of(a) == nest for l in a.loops})
    return [Unroll(h, f) for h in [0, *heights] for f in PARTIAL_FACTORS if f == 1 or h + 1 in heights]


def choose_plan(kernel: KernelAccesses, ptx: dict) -> tuple[dict, int | None]:
    """The unrolling plan whose static instruction counts come closest to the PTX's
    (``ptx``: {kind: count} of this kernel); returns (plan, distance), 0 = exact, and
    ({}, None) without PTX. Nests are planned independently; their counts add up."""
    if not ptx:
        return {}, None
    target = ptx_kinds(ptx)
    nests = sorted({nest_of(a) for a in kernel.accesses})
    counted: dict = {}
    for nest in nests:
        part = dataclasses.replace(kernel, accesses=[a for a in kernel.accesses if nest_of(a) == nest])
        counted[nest] = [(u, static_counts(compiled_instructions(part, {nest: u}))) for u in _options(kernel, nest)]
    best, best_distance = {}, None
    for combo in itertools.product(*(counted[n] for n in nests)):
        total: Counter = Counter()
        for _, counts in combo:
            total.update(counts)
        distance = sum(abs(total[k] - target[k]) for k in set(total) | set(target))
        # Prefer the closest plan; among equals, the least unrolling (the first found).
        if best_distance is None or distance < best_distance:
            best, best_distance = {n: u for n, (u, _) in zip(nests, combo, strict=False)}, distance
    return best, best_distance


def analyze_compiled(kernel: KernelAccesses, plan: dict, row_budget: int = ROW_BUDGET) -> KernelBanks:
    """Bank results per compiled instruction (numbered in order; ``text`` names the TIR
    access and the unrolled copy it comes from)."""
    results = []
    for number, ins in enumerate(compiled_instructions(kernel, plan), start=1):
        where = ", ".join(f"{v.name}={x}" for v, x in ins.fixed)
        suffix = "".join([f" v{ins.width}" if ins.width > 1 else "", f" at {where}" if where else "",
                          f" (×{ins.copies} in the TIR)" if ins.copies > 1 else ""])
        access = dataclasses.replace(ins.access, number=number, loops=ins.loops, guards=ins.guards,
                                     lanes=ins.access.lanes * ins.width, duplicate_of=None,
                                     text=f"#{ins.access.number} {ins.access.text}{suffix}")
        bound = dataclasses.replace(kernel, bindings=_bindings(kernel, ins.fixed))
        results.append(analyze_access(access, bound, row_budget))
    totals = {}
    for op in ("load", "store"):
        mine = [r for r in results if r.op == op]
        totals[op] = BankTotals(sum(r.requests for r in mine), sum(r.wavefronts for r in mine),
                                sum(r.conflicts for r in mine))
    launch = kernel.launch
    described = "; ".join(f"nest {n or '(none)'}: height ≤ {u.height} unrolled"
                          + (f", next level ×{u.factor}" if u.factor > 1 else "") for n, u in sorted(plan.items()))
    note = f"as compiled ({described or 'nothing unrolled'}): repeated loads merged, invariant loads hoisted, " \
           f"consecutive aligned accesses vectorised"
    return KernelBanks(launch.kernel, launch.block, launch.grid, tuple(results), totals["load"], totals["store"],
                       (note, *(f"not modelled: {why}" for why in kernel.unsupported)))


def compiled_report(kernels: list[KernelAccesses], ptx: dict) -> tuple[BankReport, dict]:
    """The as-compiled bank report, each kernel's plan chosen from ``ptx`` ({kernel: {PTX
    kind: count}}); returns (report, {kernel: (plan, distance)})."""
    chosen = {k.launch.kernel: choose_plan(k, ptx.get(k.launch.kernel, {})) for k in kernels}
    report = BankReport(tuple(analyze_compiled(k, chosen[k.launch.kernel][0]) for k in kernels))
    return report, chosen
