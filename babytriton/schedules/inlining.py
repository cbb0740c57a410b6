"""Inlining with limits (`inline`): producers go into their consumers while the inlined expression
stays small enough for TVM's simplifier and LLVM (math calls nested at most MAX_CALL_DEPTH deep on a
CPU, at most MAX_TREE_SIZE nodes everywhere)."""
from __future__ import annotations

import tvm

from ..operators import legalize
from .analysis import stored_value


MAX_CALL_DEPTH = 2  # math calls nested in one inlined expression (see `inline`); 3 tanh: 7 s of LLVM
_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "body")


# calls whose lowering names their argument once: they don't grow an inlined expression. (Not
# `reinterpret`, legalize.subtract's guard: a bfloat16 x - y under sigmoid under tanh, inlined, had
# TVM's bf16 lowering bind the fast exp's variable twice; fuzz 9201028023.)
LINEAR_CALLS = {f"tirx.{name}" for name in ("sqrt", "rsqrt", "pow", "fabs", "floor", "ceil", "round", "trunc",
                                             "nearbyint", "isnan", "isinf", "isfinite",
                                             "copysign", "if_then_else", "log", "exp", "sin", "cos")}


def _call_depth(expr) -> int:
    """How deeply math calls that repeat their argument (tanh, erf) nest in an expression:
    tanh(erf(x)) is 2, sqrt(x / pow(b, n)) is 0."""
    if isinstance(expr, tvm.ir.expr.Call):
        if legalize.is_kept(expr):  # the guard's round trip through an integer: two bit casts, no work
            return _call_depth(expr.args[0].args[0])
        inner = max((_call_depth(arg) for arg in expr.args), default=0)
        linear = isinstance(expr.op, tvm.ir.Op) and expr.op.name in LINEAR_CALLS
        return inner + (0 if linear else 1)
    return max((_call_depth(getattr(expr, f)) for f in _FIELDS if isinstance(getattr(expr, f, None), tvm.ir.expr.Expr)),
               default=0)


# On a GPU no call depth limits inlining: CUDA calls tanhf (erff, expf) on its argument written once,
# and nvcc computes a call repeated on the same value once (a GELU-tanh backward's nine tanh: one
# ex2 in the PTX). Kept buffers cost more there: the kernel leaves Elementwise for Fallback's scalar
# loads. The tree size still bounds what TVM's simplifier walks.
GPU_CALL_DEPTH = None

MAX_TREE_SIZE = 4000  # the simplifier's cost of one inlined expression: its nodes as a tree, conditions weighted (Costs)


def _children(expr) -> list:
    """The operands of an expression node: its fields, a call's arguments, a load's indices."""
    children = [getattr(expr, f) for f in _FIELDS if isinstance(getattr(expr, f, None), tvm.ir.expr.Expr)]
    if isinstance(expr, tvm.ir.expr.Call):
        children += list(expr.args)
    if isinstance(expr, tvm.ir.expr.TensorLoad):
        children += list(expr.indices)
    return children


def _tree_size(expr, memo: dict, leaf=None) -> int:
    """Nodes of `expr` counted as a tree (a shared subexpression once per use), in time linear in
    the DAG; with `leaf` (a node type, or a test of a node), only the nodes that are of it."""
    key = expr.__hash__()
    if key in memo:
        return memo[key][1]
    children = _children(expr)
    own = 1 if leaf is None or (isinstance(expr, leaf) if isinstance(leaf, type) else leaf(expr)) else 0
    total = own + sum(_tree_size(c, memo, leaf) for c in children)
    memo[key] = (expr, total)  # the expression kept alive: its hash (an address) stays its own
    return total


# A select's condition costs TVM's simplifier several visits: it is simplified, then entered as a
# constraint for the true arm and, negated, for the false one, and each arm is checked under it. A
# value named in a condition is thus walked about CONDITION_VISITS times per select around it, and a
# chain of selects (NaN-aware clamps name their operand in the condition and an arm) grows that
# cost geometrically: three clamps and a mish inlined took 4 s a block in each of its passes (10
# blocks: 45 s to build for sm_90), two clamps 6 ms, while a deeper but unchained nest (log1p,
# leaky_relu and erf under a split: p79) costs little. An inlined expression's cost, so weighted,
# stays within the inliner's bound (MAX_TREE_SIZE: the node count of one without selects); past it,
# a value stays a block (computed into registers, or once per read).
CONDITION_VISITS = 3


def visit_weights(expr, children: int) -> list:
    """How many times the simplifier walks each of `expr`'s `_children`: a select's condition (its
    first) CONDITION_VISITS times, anything else once."""
    return [CONDITION_VISITS, 1, 1] if isinstance(expr, tvm.tirx.Select) else [1] * children


class Costs:
    """The simplifier's cost of expressions as trees (see CONDITION_VISITS), in time linear in their
    DAGs, memoised by node for one `inline` run: nodes are immutable, so a subexpression's cost holds
    while the blocks around it merge (walked afresh per check, they were half of a 37 s compile)."""

    def __init__(self):
        self.nodes, self.loads = {}, {}  # node -> (node, its children, its cost); buffers -> node -> weight

    def _node(self, expr) -> tuple:
        key = expr.__hash__()
        if key not in self.nodes:  # the node kept alive: its hash (an address) stays its own
            children = _children(expr)
            weights = visit_weights(expr, len(children))
            self.nodes[key] = (expr, list(zip(weights, children)),
                               1 + sum(w * self._node(c)[2] for w, c in zip(weights, children)))
        return self.nodes[key]

    def cost(self, expr) -> int:
        return self._node(expr)[2]

    def load_weight(self, expr, written: list) -> int:
        """The weights the loads of the buffers `written` in `expr` carry, summed over the tree."""
        memo = self.loads.setdefault(tuple(w.__hash__() for w in written), {"buffers": written})
        key = expr.__hash__()
        if key not in memo:
            if isinstance(expr, tvm.ir.expr.TensorLoad) and any(expr.source.same_as(w) for w in written):
                memo[key] = (expr, 1)
            else:
                memo[key] = (expr, sum(w * self.load_weight(c, written) for w, c in self._node(expr)[1]))
        return memo[key][1]

    def added(self, producer, consumer) -> int:
        """What inlining the producer's stored expression into the consumer's adds to its cost (Block
        nodes, `sch.get(block)`)."""
        produced, consumed = stored_value(producer), stored_value(consumer)
        if produced is None or consumed is None:
            return 0
        written = [region.source for region in producer.writes]
        return self.load_weight(consumed, written) * (self.cost(produced) - 1)

    def merged(self, producer, consumer) -> int:
        """The cost of the consumer's stored expression with the producer's inlined into it."""
        consumed = stored_value(consumer)
        return (self.cost(consumed) if consumed is not None else 0) + self.added(producer, consumer)


# A producer read by several blocks, or several times by one (NaN-aware `maximum` names each operand
# three times, `leaky_relu` twice), is copied into each read, and LLVM does not merge the copies:
# p52's float32 chain ran 12 copies of its first three ops (48 ms against eager's 12). With
# `shared=False` (rules that compute kept blocks per vector, next to their readers) only cheap
# producers are copied: no math call (CHEAP_CALLS aside) and at most SMALL_SHARED nodes (a clamp, an
# `x + 3`); the others stay blocks, computed once.
SMALL_SHARED = 32
CHEAP_CALLS = {f"tirx.{name}" for name in ("fabs", "isnan", "isinf", "isfinite", "if_then_else", "reinterpret",
                                            "floor", "ceil", "round", "trunc", "nearbyint", "copysign")}


def _cheap_value(value) -> bool:
    """Whether a stored expression is cheap to compute again in each read (see SMALL_SHARED)."""
    if value is None or _tree_size(value, {}) > SMALL_SHARED:
        return False
    return not _tree_size(value, {}, lambda e: isinstance(e, tvm.ir.expr.Call) and not (
        isinstance(e.op, tvm.ir.Op) and e.op.name in CHEAP_CALLS))


def _reads_of_value(value, written) -> int:
    """How many times a stored expression, as a tree, loads one of the buffers `written`."""
    if value is None:
        return 2  # not one store: counted as shared
    return _tree_size(value, {}, lambda e: isinstance(e, tvm.ir.expr.TensorLoad)
                      and any(e.source.same_as(w) for w in written))


def _pairs(node) -> bool:
    """Whether a block is a reduction of (index, value) pairs (argmax, argmin), whose NaN-aware
    combiner names the value nine times. On a CPU a producer that is not `_cheap` stays a block
    (computed once per element, vectorised) rather than copied into each name: inlined there,
    -log(-log(u)) under an argmax (Gumbel-max sampling) held TVM's LLVM code generator 30 s in its
    simplifier, which binds each copy's fast-math expansion (fast_math) and explores its selects."""
    return node.init is not None and len(node.writes) > 1


def _output_blocks(sch) -> set:
    """Names of the blocks that write the function's outputs. compute_inline always refuses them, and
    its refusal costs ~20 ms (it renders the IR): a 28-output kernel spent 48 s of 83 refused."""
    try:
        return {sch.get(b).name_hint for b in sch.get_output_blocks("root")}
    except Exception:  # noqa: BLE001 - no root scope: every block is tried, as before
        return set()


class _Measures:
    """The measures `inline` weighs, of blocks' stored expressions, each computed once per Block node:
    a node is immutable (an inlining gives its consumer a new one), so its measures stay true while
    the schedule changes around it. Each trial used to walk every block's tree again: 5.3 s of a
    40-program fuzz batch's 23 s of compiling."""

    def __init__(self):
        self.memo = {}

    def _of(self, what: str, measure, *nodes):
        key = (what, *(n.__hash__() for n in nodes))  # a node's hash is its address: kept alive below
        if key not in self.memo:
            self.memo[key] = (nodes, measure(*(stored_value(n) for n in nodes)))
        return self.memo[key][1]

    def depth(self, node) -> int:
        return self._of("depth", lambda v: _call_depth(v) if v is not None else 0, node)

    def cheap(self, node) -> bool:
        return self._of("cheap", _cheap_value, node)

    def reads(self, consumer, node) -> int:
        """How many times the consumer's stored expression, as a tree, loads what `node` writes."""
        written = [region.source for region in node.writes]
        return self._of("reads", lambda v, _: _reads_of_value(v, written), consumer, node)

    def copies(self, node, others, forward: bool) -> bool:
        """Whether inlining would copy a producer that is not `_cheap` into more than one read: forward,
        `node` into its consumers `others`; reversed, its producers `others` into it."""
        if forward:
            return not self.cheap(node) and (len(others) > 1 or any(self.reads(o, node) > 1 for o in others))
        return any(not self.cheap(o) and self.reads(node, o) > 1 for o in others)


def _reverse_inline(sch, block) -> None:
    """reverse_compute_inline, but never into a reduction: a reduction over a unit axis may pass TVM's
    check (normalising dropped the axis) and the epilogue would then run on its init and on its update
    too; nor into a producer another block reads: TVM 0.27 retargets the producer's store to this
    block's buffer and leaves the other reader with an undeclared one (ill-formed TIR)."""
    if any(sch.get(p).init is not None for p in sch.get_producers(block)):
        raise ValueError("a producer is a reduction")
    if any(len(sch.get_consumers(p)) > 1 for p in sch.get_producers(block)):
        raise ValueError("a producer has other readers")
    sch.reverse_compute_inline(block)


def inline(sch, infos, max_depth: int | None = MAX_CALL_DEPTH, keep=(), shared: bool = True,
           max_tree: int = MAX_TREE_SIZE):
    """Dlight's `try_inline` with limits: a producer goes into its consumers only while the math calls
    nested in one expression stay within `max_depth`. LLVM's lowering of tanh (or erf) names its
    argument several times, so forty inlined tanh would be a 5**40-node expression; the chain keeps a
    buffer every few calls instead. GPU rules pass None (GPU_CALL_DEPTH): see there. Blocks in `keep`
    stay blocks; with `shared=False`, so do producers read more than once (SMALL_SHARED) unless cheap;
    on a CPU (`max_depth` set) so do producers of an (index, value) reduction unless cheap (`_pairs`);
    `max_tree` bounds the simplifier's cost of one inlined expression (`Costs`)."""
    kept = [sch.get(b) for b in keep]
    blocks = [info for info in infos if not any(sch.get(info.block_rv).same_as(k) for k in kept)]
    costs, measures = Costs(), _Measures()

    def fits(block, others, forward: bool) -> bool:
        node, others = sch.get(block), [sch.get(o) for o in others]
        if not shared and measures.copies(node, others, forward):
            return False
        # (CPU rules: GPU ones pass no depth, nvcc computes the nine copies once, as LLVM would after
        # the 30 s; a kept buffer costs more there, see GPU_CALL_DEPTH)
        if max_depth is not None and forward and not measures.cheap(node) and any(_pairs(o) for o in others):
            return False
        if max_depth is not None and measures.depth(node) + max(
                (measures.depth(o) for o in others), default=0) > max_depth:
            return False
        # and the expression stays small for the simplifier: NaN-aware max/min and floor `//` name each
        # operand several times, so a chain of them inlined grows exponentially (5 unrolled `maximum`s
        # kept TVM's simplifier busy for hours: fuzz 9200028250)
        # (and copied into several readers, its copies together too: p5's normalisation, cost 2900,
        # copied into 9 blocks of one kernel took TVM's lowering 14 s; kept, it is computed once)
        pairs = [(node, o) for o in others] if forward else [(o, node) for o in others]
        return all(costs.merged(*pair) <= max_tree for pair in pairs) and (
            not forward or sum(costs.added(*pair) for pair in pairs) <= max_tree)

    def trial(inline, neighbours):
        forward = neighbours == sch.get_consumers
        skip = _output_blocks(sch) if forward else set()
        for i, info in enumerate(blocks):
            # TVM refuses to move a reduction (a block with an init) either way, and each refusal
            # renders the IR (~30 ms): 578 of them were 18.7 s of a 32 s backward compile
            node = sch.get(info.block_rv)
            if node.init is not None or node.name_hint in skip or not fits(info.block_rv, neighbours(info.block_rv), forward):
                continue
            try:
                inline(info.block_rv)
            except Exception:  # noqa: BLE001 - not inlinable (TVM raises several types): the next block
                continue
            return i
        return None

    while True:
        i = trial(sch.compute_inline, sch.get_consumers)
        if i is None:
            i = trial(lambda block: _reverse_inline(sch, block), sch.get_producers)
        if i is None:
            return blocks
        blocks.pop(i)
