"""The fusion map: which Relax ops each compiled kernel contains, and which source lines they came from.

How ops are followed through the passes (no pass is changed or re-run):
  1. The code generator records the source line of every binding it emits (`binding_lines`,
     keyed by the Relax var). ConvertToDataflow keeps every binding in order, so its output is
     matched to the generated module position by position (checked by name).
  2. LegalizeOps, AnnotateTIROpPattern, FuseOps and FuseTIR keep most binding vars as the same
     objects. Where a pass made a new var (FuseOps' group outputs, helper bindings a legalization
     adds) the binding is matched by its computation instead: the same callee with the same
     (already matched) arguments.
  3. FuseOps groups bindings into `Primitive` Relax functions, and FuseMultiOutput merges some of
     them into functions returning a tuple; the bindings inside one group are the ops of one
     kernel. FuseTIR turns each group into a PrimFunc of the same name, which is the kernel; on
     a GPU its CUDA kernels are the `__global__` functions named after it.
The result is a small JSON-able record (stored in the disk cache beside the stages) with line
numbers relative to the function, so a function moved in its file keeps a correct map.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

import tvm
import tvm_ffi
from tvm import relax

from ..passes import offload

# Ops that only regroup values: edges in the picture, not nodes.
_PLUMBING = (relax.Tuple, relax.TupleGetItem)
_KERNEL_OPS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed")


# --------------------------------------------------------------------------------------------------
# walking Relax functions
# --------------------------------------------------------------------------------------------------

def bindings(expr) -> Iterator[relax.Binding]:
    """Every binding of a function body in order, those inside If branches before the If itself."""
    if isinstance(expr, relax.Function):
        expr = expr.body
    if not isinstance(expr, relax.SeqExpr):
        return
    for block in expr.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.If):
                yield from bindings(binding.value.true_branch)
                yield from bindings(binding.value.false_branch)
            yield binding


def user_functions(mod: tvm.IRModule) -> list[tuple[str, relax.Function]]:
    """The Relax functions that are not fused groups, in name order."""
    out = []
    for gv, fn in mod.functions.items():
        if isinstance(fn, relax.Function) and not _is_primitive(fn):
            out.append((gv.name_hint, fn))
    return sorted(out, key=lambda item: item[0])


def _is_primitive(fn) -> bool:
    return fn.attrs is not None and "Primitive" in fn.attrs and int(fn.attrs["Primitive"]) == 1


def _callee(call: relax.Call) -> str | None:
    """The name of what a call runs: the PrimFunc of a call_tir, a function, or an op."""
    op = call.op
    if isinstance(op, tvm.ir.Op):
        if op.name in _KERNEL_OPS:
            target = call.args[0]
            return target.name_hint if isinstance(target, tvm.ir.GlobalVar) else getattr(target, "global_symbol", op.name)
        return op.name
    if isinstance(op, tvm.ir.GlobalVar):
        return op.name_hint
    if isinstance(op, relax.ExternFunc):
        return op.global_symbol
    return None


def _operands(call: relax.Call) -> list:
    """The data arguments of a call (a call_tir's are in its tuple)."""
    if isinstance(call.op, tvm.ir.Op) and call.op.name in _KERNEL_OPS:
        args = call.args[1]
        return list(args.fields) if isinstance(args, relax.Tuple) else [args]
    return list(call.args)


def _op_name(call: relax.Call) -> str:
    name = _callee(call) or "call"
    return name[len("relax."):] if name.startswith("relax.") else name


# --------------------------------------------------------------------------------------------------
# matching the bindings of a later module to an earlier one
# --------------------------------------------------------------------------------------------------

class Matcher:
    """Relates the binding vars of a later module to those of an earlier one: identity first,
    then the same computation on already related arguments."""

    def __init__(self, earlier: list[relax.Binding]):
        self.known = {b.var.id_ for b in earlier}
        self.used: set[int] = set()
        self.index: dict[tuple, list[int]] = {}
        for binding in earlier:
            sig = self.signature(binding.value, {})
            if sig is not None:
                self.index.setdefault(sig, []).append(binding.var.id_)

    def signature(self, value, env: dict) -> tuple | None:
        if isinstance(value, relax.Call):
            name = _callee(value)
            return None if name is None else (name, tuple(self.ref(a, env) for a in _operands(value)))
        if isinstance(value, relax.TupleGetItem):
            return ("[]", self.ref(value.tuple_value, env), value.index)
        if isinstance(value, relax.Tuple):
            return ("()",) + tuple(self.ref(f, env) for f in value.fields)
        return None

    def ref(self, expr, env: dict):
        if isinstance(expr, relax.Var):
            origin = env.get(expr.id_)
            if origin is None:
                return ("var", expr.id_)
            if isinstance(origin, tuple):  # a group's parameter that a constant is passed to
                return origin
            if not origin:  # not related to the earlier module: matches nothing there
                return ("unrelated", expr.id_)
            return ("var", origin[-1])
        if isinstance(expr, relax.Tuple):
            return ("()",) + tuple(self.ref(f, env) for f in expr.fields)
        return ("expr", tvm_ffi.structural_hash(expr))

    def match(self, binding: relax.Binding, env: dict) -> list[int]:
        """The earlier var ids this binding stands for (empty when unknown)."""
        var_id = binding.var.id_
        if var_id in self.known:
            self.used.add(var_id)
            return [var_id]
        sig = self.signature(binding.value, env)
        for candidate in self.index.get(sig, []) if sig is not None else []:
            if candidate not in self.used:
                self.used.add(candidate)
                return [candidate]
        return []


def _by_position(earlier: list[relax.Binding], later: list[relax.Binding]) -> dict[int, int]:
    """later var id -> earlier var id, for a pass that keeps bindings in order (by name otherwise)."""
    if len(earlier) == len(later) and all(a.var.name == b.var.name for a, b in zip(earlier, later)):
        return {b.var.id_: a.var.id_ for a, b in zip(earlier, later)}
    pool: dict[str, list[int]] = {}
    for a in earlier:
        pool.setdefault(a.var.name, []).append(a.var.id_)
    return {b.var.id_: pool[b.var.name].pop(0) for b in later if pool.get(b.var.name)}


# --------------------------------------------------------------------------------------------------
# the record
# --------------------------------------------------------------------------------------------------

def analyse(generated: tvm.IRModule, binding_lines: dict, modules: dict[str, tvm.IRModule]) -> dict | None:
    """The fusion record of one compilation; None when the pass stages it needs are missing."""
    needed = ("ConvertToDataflow", "AnnotateTIROpPattern", "FuseOps", "FuseTIR")
    if any(stage not in modules for stage in needed):
        return None
    lines = {var.id_: line for var, line in binding_lines.items()}
    dataflow, legal, fused, final = (modules[s] for s in needed)
    fused = modules.get("FuseMultiOutput", fused)  # the groups FuseTIR makes kernels of
    ops, op_of, params, outputs = _dataflow_ops(generated, dataflow, lines)
    legal_origin = _legal_origins(dataflow, legal, op_of)
    group_ops = _group_ops(legal, fused, legal_origin)
    kernels, kernel_outputs = _kernels(fused, final, group_ops)
    _absorb(ops, kernels)
    return {"params": _unique_list(params), "ops": ops, "outputs": outputs, "kernels": kernels,
            "kernel_outputs": kernel_outputs}


def _dataflow_ops(generated: tvm.IRModule, dataflow: tvm.IRModule, lines: dict) -> tuple:
    """The ops of the dataflow module (each call that is no plumbing), with their source lines and
    inputs: (ops, dataflow var id -> op index, parameter names, output refs)."""
    ops: list[dict] = []
    op_of: dict[int, int] = {}           # dataflow var id -> op index
    producers: dict[int, list] = {}      # var id -> refs of what produced it (through tuples)
    params, outputs = [], []
    for fname, fn in user_functions(dataflow):
        before = list(bindings(generated[fname])) if fname in _names(generated) else []
        after = list(bindings(fn))
        to_generated = _by_position(before, after)
        for p in fn.params:
            params.append(p.name)
            producers[p.id_] = [["param", p.name]]
        for binding in after:
            value = binding.value
            inputs = _inputs(value, producers)
            if isinstance(value, _PLUMBING) or isinstance(value, relax.If) or not isinstance(value, relax.Call):
                producers[binding.var.id_] = inputs
                continue
            line = lines.get(to_generated.get(binding.var.id_))
            op_of[binding.var.id_] = len(ops)
            producers[binding.var.id_] = [["op", len(ops)]]
            ops.append({"op": _op_name(value), "var": binding.var.name, "line": line, "inputs": inputs})
        outputs.extend(_inputs(fn.body.body, producers))
    _inherit_lines(ops)
    return ops, op_of, params, outputs


def _legal_origins(dataflow: tvm.IRModule, legal: tvm.IRModule, op_of: dict) -> dict[int, int]:
    """Legalized var id -> op index: ops a legalization split into several bindings stay one op."""
    legal_origin: dict[int, int] = {}
    matcher = Matcher([b for _, fn in user_functions(dataflow) for b in bindings(fn)])
    for _, fn in user_functions(legal):
        helpers: dict[int, relax.Binding] = {}   # unmatched so far: maybe part of a later op
        for binding in bindings(fn):
            matched = matcher.match(binding, {})
            op = op_of.get(matched[0]) if matched else None
            if op is None:
                helpers[binding.var.id_] = binding
                continue
            legal_origin[binding.var.id_] = op
            stack = [binding.value]
            while stack:  # the helper bindings this op reads belong to it (an item of a pair: the pair)
                value = stack.pop()
                args = _operands(value) if isinstance(value, relax.Call) else \
                    [value.tuple_value] if isinstance(value, relax.TupleGetItem) else []
                for arg in args:
                    if isinstance(arg, relax.Var) and arg.id_ in helpers:
                        legal_origin[arg.id_] = op
                        stack.append(helpers.pop(arg.id_).value)
    return legal_origin


def _group_ops(legal: tvm.IRModule, fused: tvm.IRModule, legal_origin: dict) -> dict[int, list[int]]:
    """FuseOps var id -> op indices: a group is the bindings inside one Primitive function."""
    group_ops: dict[int, list[int]] = {}
    legal_matcher = Matcher([b for _, fn in user_functions(legal) for b in bindings(fn)])
    fused_funcs = {gv.name_hint: fn for gv, fn in fused.functions.items()
                   if isinstance(fn, relax.Function) and _is_primitive(fn)}
    env: dict[int, list[int]] = {}
    results: dict[int, list] = {}  # a group returning a tuple: each field's origin
    for _, fn in user_functions(fused):
        for binding in bindings(fn):
            value = binding.value
            callee = _callee(value) if isinstance(value, relax.Call) else None
            if callee in fused_funcs and isinstance(value.op, tvm.ir.GlobalVar):
                members = _group_members(fused_funcs[callee], binding, legal_matcher, env, results)
            else:
                members = legal_matcher.match(binding, env)
                env[binding.var.id_] = members
                if not members and isinstance(value, relax.TupleGetItem) \
                        and getattr(value.tuple_value, "id_", None) in results:  # a new var for a group's result
                    env[binding.var.id_] = results[value.tuple_value.id_][value.index]
            group_ops[binding.var.id_] = _unique(legal_origin[m] for m in members if m in legal_origin)
    return group_ops


def _group_members(inner_fn: relax.Function, binding: relax.Binding, legal_matcher: Matcher, env: dict,
                   results: dict) -> list[int]:
    """The legalized var ids inside the group `binding` calls (`env` and `results` updated with the
    group's result and, for a tuple, each field's origin)."""
    inner_env = dict(env)
    for param, arg in zip(inner_fn.params, binding.value.args):
        inner_env[param.id_] = _origin(arg, env) if isinstance(arg, relax.Var) else \
            ("expr", tvm_ffi.structural_hash(arg))
    members = []
    for inner in bindings(inner_fn):
        matched = legal_matcher.match(inner, inner_env)
        inner_env[inner.var.id_] = matched
        members.extend(matched)
    env[binding.var.id_] = members[-1:]
    if isinstance(inner_fn.body.body, relax.Tuple):
        results[binding.var.id_] = [_origin(f, inner_env) for f in inner_fn.body.body.fields]
    return members


def _kernels(fused: tvm.IRModule, final: tvm.IRModule, group_ops: dict) -> tuple[list[dict], list]:
    """The kernels (FuseTIR): the calls left in the final functions, each with its group's ops and
    inputs; and the refs of the final functions' outputs."""
    fused_matcher = Matcher([b for _, fn in user_functions(fused) for b in bindings(fn)])
    kernels: list[dict] = []
    made: dict[int, list] = {}
    for fname, fn in user_functions(final):
        for p in fn.params:
            made[p.id_] = [["param", p.name]]
        for binding in bindings(fn):
            value = binding.value
            inputs = _inputs(value, made)
            if not (isinstance(value, relax.Call) and _is_kernel_call(value, final)):
                made[binding.var.id_] = inputs
                continue
            matched = fused_matcher.match(binding, {})
            origin = matched[0] if matched else None
            members = group_ops.get(origin, [])
            made[binding.var.id_] = [["kernel", len(kernels)]]
            kernels.append({"name": _callee(value), "ops": members, "inputs": inputs, "fused": len(members) > 1})
    kernel_outputs = [ref for _, fn in user_functions(final) for ref in _inputs(fn.body.body, made)]
    return kernels, kernel_outputs


def _absorb(ops: list[dict], kernels: list[dict]) -> None:
    """An op no kernel computes, whose results only one kernel reads, was absorbed by that kernel:
    a transpose that the cuBLAS call reads as a transposed view, say."""
    kernel_of = {op: i for i, kernel in enumerate(kernels) for op in kernel["ops"]}
    consumers: dict[int, set] = {}
    for index, op in enumerate(ops):
        for ref in op["inputs"]:
            if ref[0] == "op":
                consumers.setdefault(ref[1], set()).add(index)
    for index in reversed(range(len(ops))):  # consumers first: a chain of absorbed ops follows along
        readers = {kernel_of.get(c) for c in consumers.get(index, ())}
        if index not in kernel_of and len(readers) == 1 and None not in readers:
            (kernel,) = readers
            kernel_of[index] = kernel
            kernels[kernel]["ops"] = sorted(kernels[kernel]["ops"] + [index])
            kernels[kernel]["fused"] = True


def _names(mod: tvm.IRModule) -> set[str]:
    return {gv.name_hint for gv in mod.functions}


def _is_kernel_call(call: relax.Call, mod: tvm.IRModule) -> bool:
    op = call.op
    if isinstance(op, tvm.ir.Op):
        return op.name in _KERNEL_OPS
    if isinstance(op, tvm.ir.GlobalVar):
        return isinstance(mod[op], tvm.tirx.PrimFunc)
    return isinstance(op, relax.ExternFunc)


def _origin(expr, env: dict) -> list[int]:
    if isinstance(expr, relax.Var):
        return env.get(expr.id_, [expr.id_])
    return []


def _inputs(value, producers: dict) -> list:
    """The producers (params, ops, kernels) a value reads, looking through tuples and branches."""
    refs: list = []
    if isinstance(value, relax.Var):
        refs.extend(producers.get(value.id_, []))
    elif isinstance(value, relax.Call):
        for arg in _operands(value):
            refs.extend(_inputs(arg, producers))
    elif isinstance(value, relax.Tuple):
        for field in value.fields:
            refs.extend(_inputs(field, producers))
    elif isinstance(value, relax.TupleGetItem):
        refs.extend(_inputs(value.tuple_value, producers))
    elif isinstance(value, relax.If):
        for expr in (value.cond, value.true_branch.body, value.false_branch.body):
            refs.extend(_inputs(expr, producers))
    elif isinstance(value, relax.SeqExpr):
        refs.extend(_inputs(value.body, producers))
    return _unique_list(refs)


def _inherit_lines(ops: list[dict]) -> None:
    """A binding the builder made on its own (a call nested in another) takes its consumer's line."""
    for op in reversed(ops):
        if op["line"] is None:
            continue
        for ref in op["inputs"]:
            if ref[0] == "op" and ops[ref[1]]["line"] is None:
                ops[ref[1]]["line"] = op["line"]


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def _unique_list(refs: list) -> list:
    seen, out = set(), []
    for ref in refs:
        key = tuple(ref) if isinstance(ref, list) else ref
        if key not in seen:
            seen.add(key)
            out.append(ref)
    return out


# --------------------------------------------------------------------------------------------------
# what users see
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FusedOp:
    """One Relax op inside a kernel, with the user's line it came from (None when unknown)."""
    op: str
    var: str
    line: int | None
    source: str | None


@dataclass(frozen=True)
class FusedKernel:
    """One compiled kernel: its name, the ops fused into it, and its CUDA kernels on a GPU."""
    name: str
    ops: tuple[FusedOp, ...]
    fused: bool
    cuda_kernels: tuple[str, ...] = ()
    rule: str = ""     # the schedule rule that scheduled it ("none": no rule did)
    launch: str = ""   # grid x block on a GPU, parallel extent x vector width on a CPU
    why: str = ""      # on Fallback (or no rule): why the rules before it declined it ("Rule: reason; ...")

    @property
    def lines(self) -> list[int]:
        return sorted({op.line for op in self.ops if op.line is not None})


class FusionMap(tuple):
    """The kernels of a compiled function, in call order; prints as a table."""

    def __new__(cls, kernels, filename: str = ""):
        self = super().__new__(cls, kernels)
        self.filename = filename
        return self

    def __getitem__(self, item):
        if isinstance(item, str):
            for kernel in self:
                if kernel.name == item:
                    return kernel
            raise KeyError(f"no kernel named {item!r}; kernels: {', '.join(k.name for k in self)}")
        return super().__getitem__(item)

    def __str__(self) -> str:
        if not self:
            return "(no kernels)"
        out = []
        for kernel in self:
            head = f"kernel {kernel.name}"
            if kernel.cuda_kernels:
                head += f"  [CUDA: {', '.join(kernel.cuda_kernels)}]"
            if kernel.fused:
                head += f"  ({len(kernel.ops)} ops fused)"
            if kernel.rule:
                head += f"  rule {kernel.rule}: {kernel.launch}"
            if kernel.why:
                head += f"; declined by {kernel.why}"
            out.append(head)
            for op in kernel.ops:
                where = f"{self.filename}:{op.line}" if op.line is not None else "(line unknown)"
                out.append(f"    {op.op:<14} {op.var:<10} {where:<30} {op.source or ''}".rstrip())
        return "\n".join(out)

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def fusion_map(record: dict | None, source_map, cuda_source: str = "",
               schedules: dict[str, tuple[str, str, str]] | None = None) -> FusionMap:
    """Turn a stored record into the user's view: file lines and their text, CUDA kernel names and,
    from `schedules` (kernel -> (rule, launch shape, why declined)), how each kernel was scheduled."""
    schedules = schedules or {}
    if record is None:
        return FusionMap([], source_map.filename)
    globals_ = cuda_kernel_names(cuda_source)
    kernels = []
    for kernel in record["kernels"]:
        ops = []
        for index in kernel["ops"]:
            op = record["ops"][index]
            line, text = _file_line(source_map, op["line"])
            ops.append(FusedOp(op["op"], op["var"], line, text))
        pattern = re.compile(rf"{re.escape(kernel['name'])}_kernel(_?\d+)?")
        cuda = tuple(n for n in globals_ if pattern.fullmatch(n))
        rule, launch, *why = schedules.get(kernel["name"]) or offload.rule_of(kernel["name"]) or ("", "")
        kernels.append(FusedKernel(kernel["name"], tuple(ops), bool(kernel["fused"]), cuda, rule, launch, *why))
    return FusionMap(kernels, source_map.filename)


def _file_line(source_map, relative: int | None) -> tuple[int | None, str | None]:
    if relative is None:
        return None, None
    text = source_map.lines[relative - 1].strip() if 0 < relative <= len(source_map.lines) else None
    return source_map.file_line(relative), text


_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")


def cuda_kernel_names(source: str) -> list[str]:
    return list(dict.fromkeys(_GLOBAL.findall(source))) if source else []  # declared, then defined
