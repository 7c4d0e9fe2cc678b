"""Evaluate TIR index expressions over many thread/loop values at once with NumPy.

``compile_expr(expr)`` turns a TIR integer/boolean expression into a function from an
environment ``{Var: ndarray}`` to an ndarray, broadcasting like NumPy: the analyses bind
each loop and thread variable to an array shaped for its axis (iterations × warps × lanes)
and evaluate an index once for all of them. Only what lowered index expressions and
guards contain is supported; anything else raises :class:`Unsupported` (the analysis
then reports the access as not modelled instead of guessing).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import tvm
from tvm import tirx

Env = Mapping[object, np.ndarray]
Compiled = Callable[[Env], np.ndarray]
BufferLoad = tvm.ir.expr.TensorLoad  # tirx.BufferLoad is a constructor function in TVM 0.27; .source is the buffer


class Unsupported(Exception):
    """An expression the evaluator cannot compute (e.g. an index read from memory)."""


def _trunc_div(a, b):
    # C semantics (T.Div on integers): round toward zero.
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _trunc_mod(a, b):
    return a - b * _trunc_div(a, b)


_BINARY = {
    tirx.Add: np.add,
    tirx.Sub: np.subtract,
    tirx.Mul: np.multiply,
    tirx.FloorDiv: np.floor_divide,
    tirx.FloorMod: np.mod,
    tirx.Div: _trunc_div,
    tirx.Mod: _trunc_mod,
    tirx.Min: np.minimum,
    tirx.Max: np.maximum,
    tirx.EQ: np.equal,
    tirx.NE: np.not_equal,
    tirx.LT: np.less,
    tirx.LE: np.less_equal,
    tirx.GT: np.greater,
    tirx.GE: np.greater_equal,
    tirx.And: np.logical_and,
    tirx.Or: np.logical_or,
    tirx.BitwiseAnd: np.bitwise_and,
    tirx.BitwiseOr: np.bitwise_or,
    tirx.BitwiseXor: np.bitwise_xor,
    tirx.LShift: np.left_shift,
    tirx.RShift: np.right_shift,
}

_CALLS = {
    "shift_right": np.right_shift,
    "shift_left": np.left_shift,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}


def op_name(call) -> str:
    """``prim.if_then_else`` → ``if_then_else``."""
    return str(call.op.name).rsplit(".", 1)[-1]


def compile_expr(expr, bindings: Mapping[object, object] | None = None) -> Compiled:
    """Compile ``expr``; ``bindings`` maps let-bound variables to their expressions, and the buffer
    of a one-element register written once (``group[0] = threadIdx.x >> 4``, as a kernel
    written in TVMScript keeps a value it names) to the value written."""
    bindings = bindings or {}
    cache: dict = {}

    def go(e) -> Compiled:
        key = e
        if key in cache:
            return cache[key]
        fn = _compile(e, go, bindings)
        cache[key] = fn
        return fn

    return go(expr)


def _compile(e, go, bindings) -> Compiled:
    if isinstance(e, tirx.IntImm):
        value = bool(e.value) if str(e.ty) == "bool" else int(e.value)
        return lambda env, value=value: np.asarray(value)
    if isinstance(e, tirx.Var):
        if e in bindings:
            inner = go(bindings[e])
            return inner
        def read(env, var=e):
            try:
                return env[var]
            except KeyError:
                raise Unsupported(f"variable '{var.name}' has no value here") from None
        return read
    op = _BINARY.get(type(e))
    if op is not None:
        a, b = go(e.a), go(e.b)
        return lambda env: op(a(env), b(env))
    if isinstance(e, tirx.Not):
        a = go(e.a)
        return lambda env: np.logical_not(a(env))
    if isinstance(e, tirx.BitwiseNot):
        a = go(e.a)
        return lambda env: np.invert(a(env))
    if isinstance(e, tirx.Cast):
        a = go(e.value)
        if str(e.ty) == "bool":
            return lambda env: a(env).astype(bool)
        if not str(e.ty).startswith(("int", "uint")):
            raise Unsupported(f"cast to {e.ty} in an index")
        return a
    if isinstance(e, tirx.Select):
        c, t, f = go(e.condition), go(e.true_value), go(e.false_value)
        return lambda env: np.where(c(env), t(env), f(env))
    if isinstance(e, tirx.Let):
        value, body, var = go(e.value), go(e.body), e.var
        return lambda env: body({**env, var: value(env)})
    if isinstance(e, BufferLoad) and e.source in bindings:
        return go(bindings[e.source])
    if isinstance(e, tvm.ir.Call):
        name = op_name(e)
        args = [go(a) for a in e.args]
        if name == "if_then_else":
            c, t, f = args
            return lambda env: np.where(c(env), t(env), f(env))
        if name == "likely":
            return args[0]
        if name in _CALLS:
            op2 = _CALLS[name]
            return lambda env: op2(args[0](env), args[1](env))
        raise Unsupported(f"call to {name} in an index")
    raise Unsupported(f"{type(e).__name__} in an index")


def free_vars(expr, bindings: Mapping[object, object] | None = None) -> set:
    """Variables ``expr`` depends on, looking through let bindings."""
    bindings = bindings or {}
    found: set = set()
    local: set = set()  # variables bound by a Let inside the expression
    stack = [expr]
    seen: set = set()
    while stack:
        e = stack.pop()
        if e in seen:
            continue
        seen.add(e)
        if isinstance(e, tirx.Var):
            if e in bindings:
                stack.append(bindings[e])
            else:
                found.add(e)
            continue
        if isinstance(e, BufferLoad) and e.source in bindings:  # a register written once: its value
            stack.append(bindings[e.source])
            continue
        if isinstance(e, tirx.Let):
            local.add(e.var)
        stack.extend(expr_children(e))
    return found - local



def compile_guarded(index, guards, bindings: Mapping[object, object] | None = None):
    """An access's index and its guards (``(condition, must be true?)`` pairs) compiled, and the variables
    the two depend on together: what every analysis that enumerates an access's threads starts from."""
    used = free_vars(index, bindings)
    for cond, _ in guards:
        used |= free_vars(cond, bindings)
    return compile_expr(index, bindings), [(compile_expr(c, bindings), want) for c, want in guards], used

_EXPR_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride", "body")
_LIST_FIELDS = ("args", "indices", "vectors")
_FIELDS_BY_TYPE: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def expr_children(e) -> list:
    """Direct sub-expressions of a TIR expression (operands, call arguments, indices)."""
    fields = _FIELDS_BY_TYPE.get(type(e))
    if fields is None:  # which attributes hold sub-expressions is fixed per node type
        single = tuple(n for n in _EXPR_FIELDS if isinstance(getattr(e, n, None), tvm.ir.expr.Expr))
        lists = tuple(n for n in _LIST_FIELDS if getattr(e, n, None) is not None)
        fields = _FIELDS_BY_TYPE[type(e)] = (single, lists)
    out = [getattr(e, n) for n in fields[0]]
    for n in fields[1]:
        out.extend(getattr(e, n))
    return out
