"""Control flow for the Relax backend: `if`, `break`, `continue`, `return`, and the loops' plumbing.

A body is compiled as a *stream*: its statements followed by markers where each construct ends (an
iteration, a loop, the function). Compile-time decisions edit the stream: an `if` on a Python value
splices in the branch it takes, an unrolled loop splices in its iterations, and an exit (`break`,
`continue`, `return`) skips ahead to its marker. An `if` on a tensor becomes a Relax `If` whose two
branches are compiled separately; it yields every variable the branches assign, merged by the rules
of `a if c else b`. An exit under a run-time condition moves the rest of the stream, up to the exit's
marker, into the branch that does not exit, so each branch runs to that marker and the `If` merges
there. Loops that are not unrolled become recursive Relax functions (loops.py).
"""
from __future__ import annotations

import ast

import tvm_ffi
from tvm import relax, tirx
from tvm.script.ir_builder import relax as RB
from tvm.sym import Analyzer

from ..core.errors import Diagnostic, PathDependent
from ..core.types import format_shape
from .operators import number_dtype
from .scope import FlowSlot, Undefined
from .values import (describe, dtype_of, is_python_scalar, is_symbolic, is_tensor, promote, scalar_kind,
                     shape_of)

RETURN = FlowSlot("return")   # the scope slot of the value the function returns


class _NoReturn:
    def __repr__(self):
        return "NO_RETURN"


NO_RETURN = _NoReturn()   # the value of RETURN on a path that has not returned (yet)
MISSING = object()        # a name not defined on a path


# ----------------------------------------------------------------------------------------------
# markers: where an exit lands, and small steps the compiler inserts into a stream
# ----------------------------------------------------------------------------------------------
class Marker:
    """A step in a stream that is not a statement of the user's."""

    key = None  # the exit that lands here: ("break", loop), ("continue", loop) or ("return", None)

    def run(self, flow: "Flow"):
        pass


class IterEnd(Marker):
    """The end of one iteration: where `continue` lands."""

    def __init__(self, loop):
        self.key = ("continue", loop)


class LoopEnd(Marker):
    """The end of a loop (after its `else`): where `break` lands."""

    def __init__(self, loop):
        self.key = ("break", loop)


class FunctionEnd(Marker):
    """Where `return` lands: the function returns what the paths that reach it hold."""

    key = ("return", None)

    def run(self, flow):
        value = flow.cg.scope.lookup(RETURN)
        flow.cg.returned = None if value is NO_RETURN else value


class BranchEnd(Marker):
    """The end of one branch of a run-time `if`: exits that land beyond it become pending."""

    def __init__(self, key):
        self.key = key


class Exit(Marker):
    """`break`, `continue` or `return` that the compiler inserts."""

    def __init__(self, key):
        self.key_to = key

    def run(self, flow):
        flow.exit(self.key_to)


class Jump(Marker):
    """Skip to a marker without an exit's side effects."""

    def __init__(self, key):
        self.key_to = key

    def run(self, flow):
        flow.stream.pos = flow.stream.find(self.key_to)[0]


class SetName(Marker):
    """Set a scope slot (a flag) on this path."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def run(self, flow):
        flow.cg.scope.assign(self.name, self.value)


class SetTarget(Marker):
    """Bind an unrolled loop's target for one iteration."""

    def __init__(self, loop, value):
        self.loop, self.value, self.node = loop, value, loop.target

    def run(self, flow):
        flow.cg.assign(self.loop.target, self.value)


class PendingExit(Marker):
    """After an `If` merges: finish an exit that one of its paths started."""

    def __init__(self, key, node):
        self.key_to, self.node = key, node

    def run(self, flow):
        flow.resolve_pending(self.key_to, self.node)


class Step(Marker):
    """Something the compiler does between statements, e.g. leaving a `with bt.device(...)` block."""

    def __init__(self, action):
        self.action = action

    def run(self, flow):
        self.action()


class Stream:
    """Statements and markers compiled in order; `pos` is the next item."""

    def __init__(self, items):
        self.items = list(items)
        self.pos = 0

    def splice(self, items):
        self.items[self.pos:self.pos] = list(items)

    def find(self, key) -> tuple[int, bool]:
        """The index of the marker `key` lands on (found), or of the branch end that stops the search."""
        for index in range(self.pos, len(self.items)):
            item = self.items[index]
            if isinstance(item, Marker) and item.key == key:
                return index, True
            if isinstance(item, BranchEnd):
                return index, False
        return len(self.items), False


# ----------------------------------------------------------------------------------------------
# what the source says, read once
# ----------------------------------------------------------------------------------------------
def loop_owners(tree: ast.AST) -> dict:
    """Each `break` / `continue` -> the loop it belongs to (None outside any loop)."""
    owners = {}

    def walk(node, loop):
        for field, value in ast.iter_fields(node):
            inner = node if isinstance(node, (ast.For, ast.While)) and field == "body" else loop
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, (ast.Break, ast.Continue)):
                    owners[child] = inner
                if isinstance(child, ast.AST):
                    walk(child, inner)
    walk(tree, None)
    return owners


def exit_keys(items, owners) -> list:
    """The exits in these statements that leave them: their keys, in order of appearance."""
    inner_loops = {n for item in items if isinstance(item, ast.AST) for n in ast.walk(item)
                   if isinstance(n, (ast.For, ast.While))}
    keys = []
    for item in items:
        if isinstance(item, (Exit, Jump)):
            found = [item.key_to]
        elif isinstance(item, ast.AST):
            found = []
            for node in ast.walk(item):
                if isinstance(node, ast.Return):
                    found.append(("return", None))
                elif isinstance(node, (ast.Break, ast.Continue)) and owners.get(node) not in inner_loops:
                    found.append(("break" if isinstance(node, ast.Break) else "continue", owners.get(node)))
        else:
            found = []
        keys += [k for k in found if k not in keys]
    return keys


def definitely_exits(items) -> bool:
    """Whether every path through these statements ends in an exit (read from the source alone)."""
    for item in items:
        if isinstance(item, (ast.Break, ast.Continue, ast.Return, Exit, Jump)):
            return True
        if isinstance(item, ast.If) and item.orelse and definitely_exits(item.body) \
                and definitely_exits(item.orelse):
            return True
    return False


def assigned_names(stmts) -> list[str]:
    names = []
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
                names.append(node.id)
    return names


def loaded_names(nodes) -> list[str]:
    names = []
    for item in nodes:
        for node in ast.walk(item):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in names:
                names.append(node.id)
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id not in names:
                names.append(node.target.id)  # x += 1 reads x
    return names


# ----------------------------------------------------------------------------------------------
# values on two paths
# ----------------------------------------------------------------------------------------------
def leaves(value) -> list:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def rebuild(template, values):
    """`template` with its leaves replaced, in order, by `values` (an iterator)."""
    if isinstance(template, tuple):
        return tuple(rebuild(t, values) for t in template)
    return next(values)


def structure(value):
    return tuple(structure(v) for v in value) if isinstance(value, tuple) else None


def same_value(a, b) -> bool:
    if a is b:
        return True
    if is_symbolic(a) and is_symbolic(b):
        return tvm_ffi.structural_equal(a, b)
    if isinstance(a, relax.Expr) or isinstance(b, relax.Expr):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a usable ==
        return False


def type_dtype(ty) -> str:
    """A TensorType's dtype as a name ("float32")."""
    return str(ty.dtype)


def describe_type(ty) -> str:
    if isinstance(ty, relax.TensorType):
        shape = tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in ty.shape.values)
        return f"a {type_dtype(ty)} tensor of shape {format_shape(shape)}"
    return str(ty)


def same_type(a, b) -> bool:
    return tvm_ffi.structural_equal(a, b)


def symbolic_vars(exprs) -> list:
    found = []
    for expr in exprs:
        for var in tirx.analysis.undefined_vars(expr):
            if not any(var.same_as(v) for v in found):
                found.append(var)
    return found


class Flow:
    """Compiles statement streams for one RelaxCodeGen: the `if`s, exits and loop plumbing."""

    def __init__(self, cg):
        self.cg = cg
        self.owners = loop_owners(cg.parsed.tree)
        self.stream: Stream | None = None
        self.leaves: dict = {}     # loop node -> its RecursiveLoop while that loop's body compiles
        self.pending: dict = {}    # the slot of an exit under way (FlowSlot) -> its exit key
        self.loop_count = 0        # recursive loops so far (names their functions)
        self.run_time_ifs = 0      # run-time `if` branches being compiled around the current statement
        self.caller: Flow | None = None  # an inlined @jit function's: the calling function's Flow

    # ------------------------------------------------------------------------------------------
    # streams
    # ------------------------------------------------------------------------------------------
    def run_body(self, body: list[ast.stmt]):
        """A function's body: statements, then the end every `return` lands on."""
        self.cg.scope.assign(RETURN, NO_RETURN)
        self.run(Stream([*body, FunctionEnd()]))

    def splice_block(self, body: list[ast.stmt], after):
        """A block's statements run next, in this stream (so exits inside it land as usual), then `after`."""
        self.stream.splice([*body, Step(after)])

    def run(self, stream: Stream):
        saved, self.stream = self.stream, stream
        try:
            while stream.pos < len(stream.items):
                item = stream.items[stream.pos]
                stream.pos += 1
                if isinstance(item, Marker):
                    self.run_marker(item)
                else:
                    self.cg.visit(item)
        finally:
            self.stream = saved

    def run_marker(self, marker: Marker):
        """Markers are not AST nodes; their errors point at the statement they stand for."""
        node = getattr(marker, "node", None)
        if node is None:
            marker.run(self)
            return
        try:
            marker.run(self)
        except Diagnostic as e:
            raise self.cg.error(node, str(e)) from None

    def may_be_skipped(self) -> bool:
        """Whether the statement being compiled runs only if run-time values say so (in a branch of
        a run-time `if`, or in the body of a loop compiled as a recursive function; here or in the caller)."""
        return bool(self.run_time_ifs or self.leaves) or (self.caller is not None and self.caller.may_be_skipped())

    def line(self, node) -> int:
        return self.cg.parsed.source_map.file_line(node.lineno)

    # ------------------------------------------------------------------------------------------
    # conditions
    # ------------------------------------------------------------------------------------------
    def decide(self, cond, what: str):
        """True / False for a condition known at compile time, None for one decided at run time."""
        if is_tensor(cond):
            return None
        if is_symbolic(cond):
            analyzer = Analyzer()
            sizes = [v >= 0 for v in symbolic_vars([cond])]
            truth = cond if cond.ty.dtype == "bool" else cond != 0
            with analyzer.constraint_scope(tirx.all(*sizes) if sizes else tirx.const(True)):
                if analyzer.can_prove(truth):
                    return True
                if analyzer.can_prove(tirx.Not(truth)):
                    return False
            return None
        if isinstance(cond, relax.Expr):
            raise Diagnostic(f"the condition of {what} must be a bool, got {describe(cond)}")
        try:
            return bool(cond)
        except Exception:  # noqa: BLE001 - a Python object without a truth value
            raise Diagnostic(f"the condition of {what} has no truth value: {describe(cond)}") from None

    def condition(self, cond, what: str):
        """A run-time condition as Relax takes it: a 0-d bool tensor, or a bool PrimValue for sizes."""
        if is_symbolic(cond):
            return relax.prim_value(cond if cond.ty.dtype == "bool" else cond != 0)
        if cond.ty.ndim != 0:
            raise Diagnostic(f"the condition of {what} must be a single value (a 0-d tensor), got "
                             f"{describe(cond)}; reduce it first, e.g. `x.sum() > 0`")
        if dtype_of(cond) != "bool":  # Python truthiness: nonzero is true
            cond = self.cg.emit(relax.op.not_equal(cond, self.cg.const(0, dtype_of(cond))))
        if isinstance(cond, relax.Var) and cond not in self.cg.user_named and not self.cg._is_param(cond):
            self.cg.ib.name("cond", cond)
        return cond

    # ------------------------------------------------------------------------------------------
    # if
    # ------------------------------------------------------------------------------------------
    def visit_if(self, node: ast.If):
        cond = self.cg.visit(node.test)
        taken = self.decide(cond, "an `if`")
        if taken is not None:
            self.stream.splice(node.body if taken else node.orelse)
            return
        self.branch(node, self.condition(cond, "an `if`"), node.body, node.orelse)

    def branch(self, node, cond, then_items: list, else_items: list):
        """A run-time `if` in the current stream, whatever exits its branches contain."""
        keys = exit_keys(then_items + else_items, self.owners)
        if keys and (definitely_exits(then_items) or definitely_exits(else_items)
                     or any(k[0] == "return" for k in keys)):
            self.split(node, cond, then_items, else_items, keys)
        else:  # exits nested deeper become pending flags, finished after the merge
            self.runtime_if(node, cond, then_items, else_items, boundary=None)

    def split(self, node, cond, then_items: list, else_items: list, keys: list):
        """Move the rest of the stream, up to where the exits land, into both branches."""
        stream = self.stream
        end = max(stream.find(key)[0] for key in keys)
        boundary = stream.items[end].key if end < len(stream.items) else None
        tail = stream.items[stream.pos:end]
        stream.pos = end
        self.runtime_if(node, cond, then_items + tail, else_items + tail, boundary)

    def runtime_if(self, node, cond, then_items: list, else_items: list, boundary):
        scope = self.cg.scope
        self.run_time_ifs += 1
        try:
            with scope.frame() as then_names, RB.SeqExpr() as then_seq:
                self.run(Stream([*then_items, BranchEnd(boundary)]))
            with scope.frame() as else_names, RB.SeqExpr() as else_seq:
                self.run(Stream([*else_items, BranchEnd(boundary)]))
        finally:
            self.run_time_ifs -= 1
        self.merge(node, cond, (then_names, then_seq), (else_names, else_seq), boundary)
        started = self.pending_after(dict.fromkeys([*then_names, *else_names]))
        self.stream.splice([PendingExit(key, node) for key in started])

    def live_names(self, boundary):
        """The names that matter where the branches end (None: all of them)."""
        if boundary == FunctionEnd.key:  # and the parameters updated in place, written back (mutation.py)
            from . import mutation  # noqa: PLC0415 - it imports this module
            return {RETURN, *mutation.candidates(self.cg)}
        if boundary is not None and boundary[0] == "break" and boundary[1] in self.leaves:
            return self.leaves[boundary[1]].live | set(self.pending)
        return None

    def outer(self, name):
        scope = self.cg.scope
        if name in scope:
            return scope.lookup(name)
        return False if name in self.pending else MISSING

    def merge(self, node, cond, then, els, boundary):
        """After a run-time `if`: one `If` yielding what differs between the two paths."""
        (then_names, then_seq), (else_names, else_seq) = then, els
        live = self.live_names(boundary)
        names = [n for n in dict.fromkeys([*then_names, *else_names]) if live is None or n in live]
        slots, plans, shared = [], {}, {}
        for name in names:
            a = then_names[name] if name in then_names else self.outer(name)
            b = else_names[name] if name in else_names else self.outer(name)
            if name == RETURN and boundary == FunctionEnd.key:
                a, b = self.returns(node, a, b)
            if a is b:  # both paths hold one value (maybe a new name for an outer one: `v = x ** 1`)
                plans[name] = (a, [("same", leaf) for leaf in leaves(a)])
                continue
            if a is MISSING or b is MISSING or isinstance(a, Undefined) or isinstance(b, Undefined):
                plans[name] = self.undefined_after_if(node, name, a, b)
                continue
            if structure(a) != structure(b):
                raise Diagnostic(f"{self.display(name)} is {describe(a)} on one path of this `if` and "
                                 f"{describe(b)} on the other; both paths must give it the same kind of value")
            parts = []
            for x, y in zip(leaves(a), leaves(b)):
                ty = self.merged_type(name, x, y)
                if ty is None:
                    parts.append(("same", x))
                elif x is True and y is False and is_tensor(cond):
                    parts.append(("same", cond))  # a flag that is the condition itself
                elif (id(x), id(y)) in shared:  # names bound to one tensor on both paths stay so (`y = x`)
                    parts.append(("slot", shared[id(x), id(y)]))
                else:
                    shared[id(x), id(y)] = len(slots)
                    parts.append(("slot", len(slots)))
                    slots.append((name, ty, x, y))
            plans[name] = (a, parts)
        outs = self.emit_merge(cond, slots, then_seq, else_seq)
        for k, (_, _, x, y) in enumerate(slots):  # a Python number on both paths stays one
            if self.cg.is_weak(x) and self.cg.is_weak(y):
                self.cg.weak.append(outs[k])
        for name, plan in plans.items():
            if isinstance(plan, Undefined):
                value = plan
            else:
                template, parts = plan
                value = rebuild(template, iter([v if kind == "same" else outs[v] for kind, v in parts]))
            self.set(name, value)

    def emit_merge(self, cond, slots, then_seq, else_seq) -> list:
        if not slots:
            return []
        with RB.SeqExpr() as then_fix:
            then_out = [self.coerce(x, ty) for _, ty, x, _ in slots]
        with RB.SeqExpr() as else_fix:
            else_out = [self.coerce(y, ty) for _, ty, _, y in slots]

        then_branch = branch([*then_seq.binding_blocks, *then_fix.binding_blocks], pack(then_out))
        else_branch = branch([*else_seq.binding_blocks, *else_fix.binding_blocks], pack(else_out))
        var = self.cg.emit(relax.If(cond, then_branch, else_branch))
        names = list(dict.fromkeys(self.display(name, quoted=False) for name, *_ in slots))
        self.cg.ib.name("_".join(names[:3]) + ("_etc" if len(names) > 3 else ""), var)
        return self.unpack(var, len(slots))

    def unpack(self, value, count: int, wanted=None) -> list:
        """The parts of a value that packs `count` (emitting only the `wanted` indices; None elsewhere)."""
        if count == 1:
            return [value]
        return [self.cg.emit(relax.TupleGetItem(value, k)) if wanted is None or k in wanted else None
                for k in range(count)]

    def set(self, name: str | FlowSlot, value):
        if isinstance(name, FlowSlot):
            self.cg.scope.assign(name, value)
        else:
            self.cg.bind(name, value)

    def display(self, name: str | FlowSlot, quoted: bool = True) -> str:
        """How a name or slot is called in messages (quoted) and in the IR."""
        if isinstance(name, FlowSlot):
            return name.describe() if quoted else name.label
        return f"'{name}'" if quoted else name

    def returns(self, node, a, b):
        """At the end of the function, a path that did not return returns None."""
        a, b = (None if v is NO_RETURN else v for v in (a, b))
        if (a is None) != (b is None):
            where = "the `if` branch" if b is None else "the `else` path"
            raise Diagnostic(f"not every path returns a value: after this `if` (decided at run time), "
                             f"{where} reaches the end of the function without `return`; add a `return` "
                             "there (a @jit function returns the same kind of value on every path)")
        return (a, a) if a is None else (a, b)

    def undefined_after_if(self, node, name, a, b) -> Undefined:
        if isinstance(a, Undefined) and not isinstance(b, Undefined):
            return a
        if isinstance(b, Undefined):
            return b
        where = "in its `if` branch" if b is MISSING else "in its `else` branch"
        return Undefined(f"'{name}' is not defined on every path to here: the `if` on line {self.line(node)} "
                         f"is decided at run time and assigns '{name}' only {where}; assign '{name}' "
                         "before that `if` or on both of its paths")

    def merged_type(self, name: str, a, b):
        """None when the paths agree on a compile-time value, else the type of the merged value."""
        what = self.display(name)
        if not is_tensor(a) and not is_tensor(b):
            if isinstance(a, relax.Expr) and isinstance(b, relax.Expr) and not is_symbolic(a) \
                    and not is_symbolic(b) and same_type(a.ty, b.ty):
                return a.ty
            if same_value(a, b):
                return None
            if is_python_scalar(a) and is_python_scalar(b):
                return relax.TensorType([], number_dtype(scalar_kind(a), scalar_kind(b)))
            raise Diagnostic(f"{what} is {describe(a)} on one path of this `if` and {describe(b)} on the "
                             "other; only tensors and numbers can differ between paths chosen at run time")
        if is_tensor(a) and is_tensor(b):
            if dtype_of(a) != dtype_of(b):
                raise PathDependent(f"{what} is {describe(a)} on one path of this `if` and {describe(b)} on the "
                                    "other; both paths must give it one dtype (convert one with .astype())")
            if not same_type(a.ty.shape, b.ty.shape):
                raise Diagnostic(f"{what} has shape {format_shape(shape_of(a))} on one path of this `if` "
                                 f"and {format_shape(shape_of(b))} on the other; both paths must give it one shape")
            return a.ty
        tensor, other = (a, b) if is_tensor(a) else (b, a)
        if not is_python_scalar(other):
            raise Diagnostic(f"{what} is {describe(a)} on one path of this `if` and {describe(b)} on the other")
        if tensor.ty.ndim != 0:
            raise Diagnostic(f"{what} is {describe(tensor)} on one path of this `if` and the number "
                             f"{other!r} on the other; both paths must give it one shape")
        if self.cg.is_weak(tensor):  # a run-time scalar on one path, a number on the other
            return relax.TensorType([], number_dtype(dtype_of(tensor), scalar_kind(other)))
        return relax.TensorType([], promote(tensor, other))

    def coerce(self, value, ty):
        """A value as the merged type: numbers become constants, tensors are converted if needed."""
        if not isinstance(ty, relax.TensorType):
            return value
        if is_python_scalar(value):
            return self.cg.const(value, type_dtype(ty))
        if is_tensor(value) and dtype_of(value) != type_dtype(ty):
            return self.cg.emit(relax.op.astype(value, type_dtype(ty)))
        return value

    def emit_if(self, cond, then_fn, else_fn, name: str):
        """An `If` whose branches the callbacks build, each returning its value."""
        with RB.SeqExpr() as then_seq:
            then_value = then_fn()
        with RB.SeqExpr() as else_seq:
            else_value = else_fn()
        var = self.cg.emit(relax.If(cond, branch(then_seq.binding_blocks, then_value),
                                    branch(else_seq.binding_blocks, else_value)))
        return self.cg.ib.name(name, var)

    # ------------------------------------------------------------------------------------------
    # exits
    # ------------------------------------------------------------------------------------------
    def visit_exit(self, node):
        kind = "break" if isinstance(node, ast.Break) else "continue"
        loop = self.owners.get(node)
        if loop is None:
            raise Diagnostic(f"`{kind}` outside a loop")
        self.exit((kind, loop))

    def visit_return(self, node: ast.Return):
        value = self.cg.return_value(node)
        self.cg.scope.assign(RETURN, value)
        self.exit(FunctionEnd.key)

    def exit(self, key):
        stream = self.stream
        index, found = stream.find(key)
        if found:
            if key[0] == "break" and key[1] in self.leaves:
                for name, value in self.leaves[key[1]].on_break:
                    self.cg.scope.assign(name, value)
            stream.pos = index
            return
        if key[0] == "return" or index == len(stream.items):
            loop = list(self.leaves)[-1] if self.leaves else None
            raise Diagnostic("`return` inside a loop that is compiled as a recursive function (the loop on "
                             f"line {self.line(loop)}) is not supported; assign the result to a variable "
                             "and `break` out of the loop instead" if loop is not None else
                             f"internal error: no place for `{key[0]}` to land")
        name = FlowSlot(*key)
        self.pending[name] = key
        self.cg.scope.assign(name, True)
        stream.pos = index

    def pending_after(self, names) -> list:
        """Pending exits that the paths just merged may have started."""
        scope = self.cg.scope
        return [self.pending[n] for n in names if n in self.pending and n in scope
                and scope.lookup(n) is not False]

    def resolve_pending(self, key, node):
        """Finish an exit some merged paths started: where it lands, or at the end of this branch."""
        name = FlowSlot(*key)
        value = self.cg.scope.lookup(name) if name in self.cg.scope else False
        if value is False:
            return
        stream = self.stream
        index, found = stream.find(key)
        if found:
            self.cg.scope.assign(name, False)
            if value is True:
                self.exit(key)
            else:
                self.split(node, value, [Exit(key)], [], [key])
            return
        # It lands beyond this branch: skip the rest of the branch on the paths that exit.
        tail = stream.items[stream.pos:index]
        if value is True or not tail:
            stream.pos = index
            return
        stream.pos = index
        boundary = stream.items[index].key if index < len(stream.items) else None
        self.runtime_if(node, value, [SetName(name, True)], [SetName(name, False), *tail], boundary)


def branch(blocks, result) -> relax.SeqExpr:
    """One branch of an `If`, without the pure bindings its result does not need (run-time checks
    stay). Besides tidier IR: TVM's FuseOps fails on a binding nothing uses inside an `If` branch."""
    live = set(relax.analysis.free_vars(result))
    kept_blocks = []
    for block in reversed(list(blocks)):
        kept = []
        for binding in reversed(list(block.bindings)):
            if binding.var in live or relax.analysis.contains_impure_call(binding.value):
                kept.append(binding)
                live.update(relax.analysis.free_vars(binding.value))
        if kept:
            kept_blocks.append(type(block)(kept[::-1]))
    return relax.SeqExpr(kept_blocks[::-1], result)


def pack(values: list):
    return values[0] if len(values) == 1 else relax.Tuple(values)
