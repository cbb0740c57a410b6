"""Minimising a failing program: smaller variants of its text that fail the same way."""
from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from .checking import Outcome, _counter, check_file


def minimise(text: str, outcome: Outcome, workdir: Path, budget: int = 150, threads: int = 0,
             cuda: bool = False) -> tuple[str, Outcome]:
    """The smallest variant of a program file's text found that fails the same way: statements
    dropped, expressions replaced by their parts, unused parameters removed. Candidates are checked
    with the default tolerances (the generator's error bounds don't survive the edits)."""
    text = _with_default_tolerances(text)
    same = _same_failure(outcome)
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        for candidate in _candidates(text):
            tries += 1
            result = _run_text(candidate, workdir, threads, cuda)
            if same(result):
                text, outcome, improved = candidate, result, True
                break
            if tries >= budget:
                break
    return text, outcome


def _same_failure(outcome: Outcome):
    kind = outcome.kind
    # a crash: the same exception type; a refusal: the same message up to its first colon; a wrong
    # result: wrong the same way (dtype, shape or values)
    category = _category(outcome)

    def same(result: Outcome) -> bool:
        return result.kind == kind and _category(result) == category
    return same


def _category(outcome: Outcome) -> str:
    first = outcome.detail.splitlines()[0] if outcome.detail else ""
    if outcome.kind in ("crash", "compile-error"):
        return first.split(":")[0]
    if outcome.kind in ("torch-mismatch", "mismatch", "thread-mismatch"):
        first = re.sub(r"^(\(cached call\) )?(\d+ threads.*first: )?(thread \d+, call \d+: )?(result \d+: )*", "", first)
        category = first.split(":")[0].split(" at ")[0]
        values = re.search(r": \w+ (\S+), \w+ (\S+) \(", first)
        if category == "values differ" and values:  # which way: NaN or inf lost, or the sign
            ours, theirs = (float(v) for v in values.groups())
            category += (" (nan)" if math.isnan(ours) != math.isnan(theirs) else
                         " (inf)" if math.isinf(ours) != math.isinf(theirs) else
                         " (sign)" if ours == -theirs != 0 else "")
        return category
    return ""


def _with_default_tolerances(text: str) -> str:
    lines = [line if not line.startswith("TOLERANCES =") else "TOLERANCES = None" for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def _run_text(text: str, workdir: Path, threads: int = 0, cuda: bool = False) -> Outcome:
    path = workdir / f"candidate_{next(_counter)}.py"
    path.write_text(text)
    try:
        return check_file(path, threads, cuda)
    except Exception as e:  # noqa: BLE001 - a broken candidate (e.g. a NameError at import)
        return Outcome("invalid", f"{type(e).__name__}: {e}")
    finally:
        path.unlink(missing_ok=True)


def _candidates(text: str):
    """Smaller variants of a program file's text, largest cuts first."""
    module = ast.parse(text)
    fn_index = next(i for i, n in enumerate(module.body) if isinstance(n, ast.FunctionDef) and n.name == "f")
    fn = module.body[fn_index]
    body = fn.body
    # drop one statement (never the return)
    for i in range(len(body) - 1):
        yield _edited(module, fn_index, lambda f, i=i: f.body.pop(i))
    # `a = b` with b a name: drop it and read b where a was read
    for i, stmt in enumerate(body[:-1]):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Name):
            yield _edited(module, fn_index, lambda f, i=i: _inline_alias(f, i))
    # return fewer values
    ret = body[-1]
    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
        for i in range(len(ret.value.elts)):
            yield _edited(module, fn_index, lambda f, i=i: setattr(f.body[-1], "value", f.body[-1].value.elts[i]))
    # drop unused helper functions
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    for i, node in enumerate(module.body):
        if isinstance(node, ast.FunctionDef) and node.name != "f" and node.name not in used:
            yield _render(ast.Module([n for j, n in enumerate(module.body) if j != i], []))
    # plain inputs: no view, no special values
    args = next((n for n in module.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "ARGS"),
                None)
    for i, spec in enumerate(args.value.elts if args is not None else []):
        if isinstance(spec, ast.Tuple) and len(spec.elts) == 4:
            yield _without_extras(module, i)
    # drop unused parameters
    for i, arg in enumerate(fn.args.args):
        if arg.arg not in used:
            yield _without_param(module, fn_index, i)
    # replace an expression by one of its parts
    expressions = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.expr)
                   and not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))]
    for index, node in enumerate(expressions):
        for part in _parts(node):
            yield _edited(module, fn_index, lambda f, index=index, part=part: _replace(f, index, part))


def _inline_alias(fn: ast.FunctionDef, i: int):
    alias = fn.body.pop(i)
    old, new = alias.targets[0].id, alias.value.id
    for stmt in fn.body[i:]:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == old and isinstance(node.ctx, ast.Load):
                node.id = new


def _parts(node: ast.expr) -> list:
    if isinstance(node, ast.Call):
        return [a for a in node.args if not isinstance(a, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators] if len(node.ops) > 1 else []
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.Attribute):
        return [node.value] if not isinstance(node.value, ast.Name) else []
    if isinstance(node, ast.Tuple):
        return list(node.elts) if len(node.elts) > 1 else []
    return []


def _replace(fn: ast.FunctionDef, index: int, part_copy_of: ast.expr):
    expressions = [n for stmt in fn.body for n in ast.walk(stmt) if isinstance(n, ast.expr)
                   and not (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))]
    target = expressions[index]
    replacement = ast.parse(ast.unparse(part_copy_of), mode="eval").body
    for parent in ast.walk(fn):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, replacement)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = replacement
                        return


def _edited(module: ast.Module, fn_index: int, edit) -> str:
    copy = ast.parse(ast.unparse(module))
    edit(copy.body[fn_index])
    return _render(copy)


def _without_param(module: ast.Module, fn_index: int, i: int) -> str:
    copy = ast.parse(ast.unparse(module))
    fn = copy.body[fn_index]
    fn.args.args.pop(i)
    for node in copy.body:  # ARGS: the same position
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ARGS":
            node.value.elts.pop(i)
    return _render(copy)


def _without_extras(module: ast.Module, i: int) -> str:
    copy = ast.parse(ast.unparse(module))
    for node in copy.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ARGS":
            node.value.elts[i].elts.pop()
    return _render(copy)


def _render(module: ast.Module) -> str:
    return "# babytriton fuzz program (minimised)\n" + ast.unparse(module) + "\n"
