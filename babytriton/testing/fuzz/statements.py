"""Statements of a generated program: assignments, `+=`, splits, `if`/`elif`/`else` and loops."""
from __future__ import annotations

import dataclasses
import math

from .values import Unfit, V, broadcast, broadcast_dims, dims_of, finish, paren, promote, representable, symbolic


class Statements:
    """The statements a Generator writes (a mixin: the operands and expressions are its own)."""

    def statement(self, name: str) -> list[str]:
        """One statement: `name = expr`, `a, b = e1, e2`, or `v += expr` on an earlier variable."""
        rng = self.rng
        locals_ = [v for v in self.pool if v.code.startswith("v") and not v.py and v.numeric]
        choice = rng.random()
        if locals_ and choice < 0.15:
            target = rng.choice(locals_)
            e = self.expr(rng.randint(0, 2))
            op = rng.choice("+-*")
            try:
                result = e is not None and e.numeric and self.combine(op, target, e)
            except Unfit:
                result = None
            if result and result.dtype == target.dtype and result.shape == target.shape and \
                    dims_of(result) == dims_of(target):
                self.pool = [v for v in self.pool if v is not target]
                self.pool.append(dataclasses.replace(result, code=target.code))
                return [f"    {target.code} {op}= {e.code}"]
        if choice < 0.35:
            lines = (self.if_statement if rng.random() < 0.5 else self.loop_statement)(name)
            if lines:
                return lines
        if choice < 0.41:
            lines = self.split_statement(name)
            if lines:
                return lines
        if choice < 0.5:
            first, second = self.expr(rng.randint(1, 2)), self.expr(rng.randint(1, 2))
            if first is not None and second is not None:
                self.pool += [dataclasses.replace(first, code=f"{name}a"), dataclasses.replace(second, code=f"{name}b")]
                return [f"    {name}a, {name}b = {first.code}, {second.code}"]
        v = self.expr(rng.randint(1, 3))
        if v is None:
            return []
        self.pool.append(dataclasses.replace(v, code=name))
        return [f"    {name} = {v.code}"]

    def split_statement(self, name: str) -> list[str]:
        """`va, vb = x.split(k, dim=d)` (or torch.chunk, torch.split with sizes) along a static axis,
        both pieces kept; often then one piece times a math function of the other (a GEGLU)."""
        rng = self.rng
        x = self.tensor_operand(1, lambda v: any(isinstance(e, int) and e >= 2 for e in dims_of(v)))
        if x is None:
            return []
        d = dims_of(x)
        axis = rng.choice([i for i, e in enumerate(d) if isinstance(e, int) and e >= 2])
        n, spelled_axis = x.shape[axis], rng.choice((axis, axis - len(d)))
        style = rng.choice(("chunk", "chunk-method", "split", "split-sizes"))
        k = -(-n // 2) if style != "split-sizes" else rng.randint(1, n - 1)
        code = {"chunk": f"torch.chunk({x.code}, 2, {spelled_axis})",
                "chunk-method": f"{paren(x)}.chunk(2, dim={spelled_axis})",
                "split": f"{paren(x)}.split({k}, dim={spelled_axis})",
                "split-sizes": f"torch.split({x.code}, [{k}, {n - k}], dim={spelled_axis})"}[style]
        pieces = []
        for suffix, size in (("a", k), ("b", n - k)):
            shape = tuple(size if i == axis else e for i, e in enumerate(x.shape))
            dims = symbolic(size if i == axis else e for i, e in enumerate(d))
            pieces.append(dataclasses.replace(x, code=f"{name}{suffix}", shape=shape, dims=dims))
        self.pool += pieces
        lines = [f"    {name}a, {name}b = {code}"]
        gate = self.math_of(pieces[1]) if rng.random() < 0.6 else None
        try:
            gated = gate is not None and self.combine(rng.choice("*+"), pieces[0], gate)
        except Unfit:  # the pieces differ in size (an odd length): no product of the two
            gated = None
        if gated:
            self.pool.append(dataclasses.replace(gated, code=name))
            lines.append(f"    {name} = {gated.code}")
        return lines

    # -- control flow ----------------------------------------------------------------------------
    def runtime_condition(self) -> V | None:
        """A 0-d bool tensor, known exactly: a bool scalar, or a comparison of whole-tensor reductions."""
        scalars = [v for v in self.pool if v.is_bool and (v.shape == () or v.code in self.scalar_names)]
        if scalars and self.rng.random() < 0.3:
            return self.rng.choice(scalars)
        a = self.tensor_operand(1, lambda v: v.exact and v.numeric and v.shape != ())
        if a is None:
            return None
        reduced = V(f"{paren(a)}.{self.rng.choice(('sum', 'max', 'min'))}()", "int64" if not a.is_float else a.dtype,
                    (), a.mag * max(math.prod(a.shape), 1), a.gran, representable(a.dtype, a.mag * 64, a.gran))
        if not reduced.exact:
            return None
        other = self.literal(self.rng.choice(("int", "float")))
        return V(f"{reduced.code} {self.rng.choice(('>', '<=', '>=', '<'))} {other.code}", "bool", ())

    def compile_time_condition(self) -> V | None:
        constexprs = [v for v in self.pool if v.py and v.code.isidentifier()]
        if constexprs and self.rng.random() < 0.6:
            return V(f"{self.rng.choice(constexprs).code} > 1", "bool", None)
        n = self.compile_time_int()
        return V(f"{n.code} > 2", "bool", None)

    def branch_values(self) -> tuple[V, V] | None:
        """Two tensor values of one dtype and shape, one per path of an `if`."""
        first = self.expr(self.rng.randint(1, 2))
        if first is None or first.py:
            return None
        for _ in range(8):
            second = self.expr(self.rng.randint(0, 2)) if self.rng.random() < 0.7 else self.rng.choice(self.pool)
            # (a run-time scalar on one path and a tensor on the other: torch's later dtypes would
            # depend on the path taken, which babytriton merges into one type on purpose; fuzz 41000456)
            if second is not None and not second.py and second.dtype == first.dtype and \
                    second.shape == first.shape and dims_of(second) == dims_of(first) and second.weak == first.weak:
                return first, second
        return None

    def if_statement(self, name: str) -> list[str]:
        """`if`/`elif`/`else`, decided at run time (a tensor condition) or while compiling. Every path
        assigns `name` a tensor of one dtype and shape (paths that disagree are refused, or, for
        numbers, merged as compiled code merges them: see babytriton/eager/reference.py)."""
        conds = [self.runtime_condition() if self.rng.random() < 0.75 else self.compile_time_condition()
                 for _ in range(self.rng.choice((1, 1, 2)))]
        if any(c is None for c in conds):
            return []
        values = [self.branch_values() for _ in conds]
        if any(v is None for v in values):
            return []
        paths = [values[0][0], values[0][1]] + [v[0] for v in values[1:]]
        if any(p.dtype != paths[0].dtype or p.shape != paths[0].shape or dims_of(p) != dims_of(paths[0])
               or p.weak != paths[0].weak for p in paths):
            return []
        lines = [f"    if {conds[0].code}:", f"        {name} = {paths[0].code}"]
        for cond, value in zip(conds[1:], paths[2:]):
            lines += [f"    elif {cond.code}:", f"        {name} = {value.code}"]
        lines += ["    else:", f"        {name} = {paths[1].code}"]
        merged = V(name, paths[0].dtype, paths[0].shape, max(p.mag for p in paths), max(p.gran for p in paths),
                   all(p.exact for p in paths), max(p.err for p in paths), paths[0].dims, paths[0].weak)
        self.pool.append(merged)
        return lines

    def loop_range(self) -> tuple[str, int, str]:
        """A loop's kind (unrolled, recursive, runtime-bounded or `while`), trip count and header line."""
        rng = self.rng
        ints = [p for p in self.params if p.kind == "scalar" and p.spec[1] in ("int", "auto-int")
                and isinstance(p.spec[2], int)]
        kind = rng.choice(("unrolled", "unrolled", "recursive", "runtime", "while"))
        if kind == "runtime" and not ints:
            kind = "unrolled"
        trips = {"unrolled": rng.randint(0, 5), "recursive": rng.randint(17, 24), "while": rng.randint(0, 5),
                 "runtime": max(ints[0].spec[2], 0) if ints else 0}[kind]
        header = {"unrolled": f"for i in range({trips}):", "recursive": f"for i in range({trips}):",
                  "runtime": f"for i in range({ints[0].name if ints else 0}):", "while": f"while c < {trips}:"}[kind]
        return kind, trips, header

    def loop_statement(self, name: str) -> list[str]:
        """`name` accumulated over a loop: unrolled (a short constant range), a recursive function (a
        long range, a runtime bound, a `while`), perhaps with `break` or `continue`."""
        rng = self.rng
        acc = self.tensor_operand(1, lambda v: v.numeric)
        if acc is None:
            return []
        e = self.expr(rng.randint(0, 2))
        if e is None or not e.numeric:
            return []
        kind, trips, header = self.loop_range()
        # i: a Python int in an unrolled loop, a 0-d int64 tensor in a recursive one; with a tensor
        # it promotes the same way either way
        use_index = kind != "while" and not e.py and rng.random() < 0.3
        term = V(f"{paren(e)} * i", e.dtype, e.shape, e.mag * max(trips, 1), e.gran,
                 e.exact, e.err * trips, e.dims) if use_index else e
        op = rng.choice(("+", "-", "maximum"))
        try:
            step = self.combine(op, acc, term) if op != "maximum" else \
                finish(f"maximum({name}, {term.code})", promote(acc, term), broadcast(acc.shape, term.shape),
                       max(acc.mag, term.mag), max(acc.gran, term.gran), acc.exact and term.exact,
                       max(acc.err, term.err), broadcast_dims(acc, term))
        except Unfit:
            return []
        if step is None or step.dtype != acc.dtype or step.shape != acc.shape or dims_of(step) != dims_of(acc):
            return []
        stop = rng.randint(0, max(trips - 1, 0)) if kind != "while" and trips and rng.random() < 0.25 else None
        exit_kind = rng.choice(("break", "continue")) if stop is not None else None
        n = trips if exit_kind != "break" else stop
        grown = finish(name, acc.dtype, acc.shape, acc.mag + n * term.mag, max(acc.gran, term.gran),
                       acc.exact and term.exact, acc.err + n * term.err, acc.dims, ulps=n + 1)
        if grown is None:
            return []
        body = step.code.replace(paren(acc), name, 1) if op != "maximum" else step.code
        lines = [f"    {name} = {acc.code}"]
        if kind == "while":
            lines.append(f"    c = zeros((), 'int64')")
        lines.append(f"    {header}")
        if exit_kind:
            lines += [f"        if i == {stop}:", f"            {exit_kind}"]
        lines.append(f"        {name} = {body}" if op == "maximum" else f"        {name} = {name} {op} {paren(term)}")
        if kind == "while":
            lines.append("        c = c + 1")
        self.pool.append(grown)
        return lines
