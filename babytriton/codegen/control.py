"""Control flow for the Relax backend: `if`, `break`, `continue`, `return`, and the loops' plumbing.

A body is compiled as a *stream*: its statements followed by markers where each construct ends (an
iteration, a loop, the function). Compile-time decisions edit the stream: an `if` on a Python value
splices in the branch it takes, an unrolled loop splices in its iterations, and an exit (`break`,
`continue`, `return`) skips ahead to its marker. An `if` on a tensor becomes a Relax `If` whose two
branches are compiled separately; it yields every variable the branches assign, merged by the rules
of `a if c else b`. An exit under a run-time condition moves the rest of the stream, up to the exit's
marker, into the branch that does not exit, so each branch runs to that marker and the `If` merges
there. Loops that are not unrolled become recursive Relax functions (loops.py).

The stream and its markers are in stream.py, the merge of an `If`'s two paths in merge.py.
"""
from __future__ import annotations

import ast

from tvm import relax, tirx
from tvm.script.ir_builder import relax as RB
from tvm.sym import Analyzer

from ..core.errors import Diagnostic
from .merge import Merging, symbolic_vars
from .scope import FlowSlot
from .stream import (NO_RETURN, RETURN, BranchEnd, Exit, FunctionEnd, Marker, PendingExit, SetName, Step, Stream,
                     definitely_exits, exit_keys, loop_owners)
from .values import describe, dtype_of, is_symbolic, is_tensor


class Flow(Merging):
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
