"""A body as the Relax visitor's control flow compiles it (control.py): a *stream* of the user's
statements and the markers where each construct ends (an iteration, a loop, the function), which the
exits (`break`, `continue`, `return`) land on; and what the source says about them, read once."""
from __future__ import annotations

import ast

from .scope import FlowSlot

RETURN = FlowSlot("return")   # the scope slot of the value the function returns


class _NoReturn:
    def __repr__(self):
        return "NO_RETURN"


NO_RETURN = _NoReturn()   # the value of RETURN on a path that has not returned (yet)


# ----------------------------------------------------------------------------------------------
# markers: where an exit lands, and small steps the compiler inserts into a stream
# ----------------------------------------------------------------------------------------------
class Marker:
    """A step in a stream that is not a statement of the user's."""

    key = None  # the exit that lands here: ("break", loop), ("continue", loop) or ("return", None)

    def run(self, flow):  # flow: the control.Flow running the stream
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
