"""Vectorised CPU loops over rows no whole vectors tile: the whole vectors without a predicate, then a
scalar tail (`with_tails`), shared by the CPU rules that split rows raggedly."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym.pattern import detect_linear_equation

from .analysis import find_all, is_int, uses
from .lanes import substituted
from .unchecked import Schedule


def with_tails(sch):
    """The schedule with each ragged vectorised reduction loop (a predicate on its vector lanes,
    `_split_row`) cut in two: the whole vectors, without the predicate, then the last, partial step,
    its lanes one by one. TVM's vectoriser would run the whole loop a lane at a time (LoopPartition
    could cut it, but NarrowDataType leaves its hint on the old int64 loop variable: TVM 0.27)."""
    return rewrite_loops(sch, lambda loop: _ragged_vector(loop) is not None, _cut_tail)


def rewrite_loops(sch, chosen, rewrite):
    """The schedule with each loop of its function for which `chosen(loop)` holds replaced by
    `rewrite(loop)`: loop cuts a schedule's primitives cannot express, on the scheduled TIR."""
    func = sch.mod["main"]
    loops = [loop for loop in find_all(func.body, tirx.For) if chosen(loop)]
    if not loops:
        return sch

    def cut(node):
        return rewrite(node) if any(node.same_as(loop) for loop in loops) else node
    return Schedule(tvm_ffi.structural_map(func, (tirx.For, cut)))


def _ragged_vector(step):
    """For a loop of steps over a vectorised loop of one block whose predicate is
    `base + step * lanes + lane < row` (`base`: a chunk's start, free of both loops), maybe and-ed
    with conditions free of both (a chunk of reduced rows' bound): (the realize, the number of whole
    steps, the elements left after a step: a function of it, the other conditions), else None."""
    lanes_loop = step.body if isinstance(step.body, tirx.For) else None
    if lanes_loop is None or lanes_loop.kind != tirx.ForKind.VECTORIZED or not is_int(step.min, 0):
        return None
    realize = lanes_loop.body
    if not isinstance(realize, s_tir.SBlockRealize):
        return None
    loop_vars = (step.loop_var, lanes_loop.loop_var)
    tests = conjuncts(realize.predicate)
    bounds = [t for t in tests if any(uses(t, v) for v in loop_vars)]
    if len(bounds) != 1 or not isinstance(bounds[0], tirx.LT):
        return None
    a, row = bounds[0].a, bounds[0].b
    coeffs = detect_linear_equation(a, list(loop_vars))
    if len(coeffs) != 3 or not is_int(coeffs[1], 1) or not is_int(coeffs[0], int(lanes_loop.extent)) or any(
            uses(coeffs[2], v) or uses(row, v) for v in loop_vars):
        return None
    others = [t for t in tests if not t.same_as(bounds[0])]
    rest = others[0] if others else tirx.const(True, "bool")
    for test in others[1:]:
        rest = tirx.And(rest, test)
    whole = tirx.max(tirx.min(tirx.floordiv(row - coeffs[2], lanes_loop.extent), step.extent),
                     tirx.const(0, step.extent.ty.dtype))
    zero = tirx.const(0, step.extent.ty.dtype)

    def left(at):
        return tirx.min(lanes_loop.extent, tirx.max(row - coeffs[2] - at * lanes_loop.extent, zero))
    return realize, tvm.sym.Analyzer().simplify(whole), left, rest


def conjuncts(predicate) -> list:
    """The conditions and-ed together in a predicate."""
    if isinstance(predicate, tirx.And):
        return conjuncts(predicate.a) + conjuncts(predicate.b)
    return [predicate]


def _cut_tail(step):
    """A loop over the steps of a ragged vectorised loop (`_ragged_vector`) as two: the whole
    vectors (the predicate's bound dropped: it holds there; its other conditions kept) and the rest,
    a serial loop of the block renamed with fresh variables over the elements left (no step of the
    lanes loop tests and skips one)."""
    lanes_loop = step.body
    realize, whole, left, rest = _ragged_vector(step)
    lanes = lanes_loop.extent
    body = tirx.For(step.loop_var, step.min, whole, step.kind, tirx.For(
        lanes_loop.loop_var, lanes_loop.min, lanes, lanes_loop.kind,
        s_tir.SBlockRealize(realize.iter_values, rest, realize.block),
        lanes_loop.thread_binding, lanes_loop.annotations), step.thread_binding, step.annotations)
    fresh = {iv.var: tirx.Var(iv.var.name + "_tail", iv.var.ty.dtype) for iv in realize.block.iter_vars}
    block = tvm_ffi.structural_map(realize.block, [(tvm.ir.Var, lambda var: fresh.get(var, var))])
    block = s_tir.SBlock(block.iter_vars, block.reads, block.writes, block.name_hint + "_tail", block.body)
    s_var = tirx.Var(step.loop_var.name + "_tail", step.loop_var.ty.dtype)
    l_var = tirx.Var(lanes_loop.loop_var.name + "_tail", lanes_loop.loop_var.ty.dtype)
    loops = {step.loop_var: s_var, lanes_loop.loop_var: l_var}
    tail_realize = s_tir.SBlockRealize([substituted(v, loops) for v in realize.iter_values],
                                       substituted(realize.predicate, loops), block)
    tail = tirx.For(s_var, whole, step.min + step.extent - whole, tirx.ForKind.SERIAL,
                    tirx.For(l_var, lanes_loop.min, left(s_var), tirx.ForKind.SERIAL, tail_realize))
    return tirx.SeqStmt([body, tail])
