# Chapter 14 - every operator, and constants of the right dtype
#
# Exercise 1 of the tutorial, solved on chapter 13 alone: this file holds that
# answer and nothing else. exercises/14_operators.py is the same file with the answer
# taken out; `diff exercises/14_operators.py chapters/14_operators.py` shows it.
#
# What: chapter 07 knew one operator, `+`, and turned every Python number
# into an int32 or float32 constant on the spot. This chapter fills in the
# tables: all of Python's binary operators (`+ - * / // % ** @ & | ^ << >>`),
# the unary ones (`- + ~ not`), comparisons (chained too: `0 < a < b`) and
# `and`/`or`. Each maps to one Relax op, with a few rules where Python's
# meaning and TVM's differ. Functions can now return several values
# (`return a + b, a - b`), which come back as a tuple of torch tensors.
#
# Why: the dtype of a constant depends on what it meets. In `h * 2.5` with
# `h` a float16 tensor, the 2.5 must be a float16 constant: Relax refuses
# to multiply float16 by float32, and a float32 constant would change the
# result's dtype. So numbers now stay Python numbers while compiling: two
# numbers fold on the spot (`2 * 3` is just 6, no IR at all), and a number
# meeting a tensor becomes a constant of the dtype the result should have.
# Which dtype is that? We follow torch, and simply ask it:
# `torch.result_type` on a stand-in tensor (or the number itself) answers
# for every pair, e.g. int32 tensor * 1.5 -> float32, int32 + float16
# tensor -> float16. The tensors are then cast with `R.astype` where needed.
# Python semantics need care in four places:
#   - `/` is true division: integer operands are divided as float32;
#   - `//` and `%` floor (Python, torch), so `%` is Relax's floor_mod, not mod;
#   - TVM's `power` only does floats: an integer `**` is computed in float64
#     and rounded back (exact below 2**53);
#   - on bool tensors, `&`, `|`, `^`, `~` are logical ops, and comparisons
#     compare them as int8 (TVM's LLVM code generator would compare bools as
#     floats); `-` and other arithmetic on bools is refused, as torch does.
#
# What to look at: the Relax for `dtypes`, where the constants are
# `R.const(2.5, "float16")` and `R.const(1, "int32")` and an `R.astype` widens
# int32 to float16. Then every operator runs on the CPU and each result is
# compared with the same Python body run by torch, dtype included.
#
# Run: python chapters/14_operators.py
import ast
import importlib
import operator

import torch
import tvm
from tvm import relax as rx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import relax as RB

ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor
op = rx.op

# Python operator -> Relax op on tensors, and -> what it means on two Python numbers.
BINARY_OPS = {
    ast.Add: op.add, ast.Sub: op.subtract, ast.Mult: op.multiply, ast.Div: op.divide,
    ast.FloorDiv: op.floor_divide, ast.Mod: op.floor_mod, ast.Pow: op.power, ast.MatMult: op.matmul,
    ast.BitAnd: op.bitwise_and, ast.BitOr: op.bitwise_or, ast.BitXor: op.bitwise_xor,
    ast.LShift: op.left_shift, ast.RShift: op.right_shift,
}
PYTHON_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
# On bool tensors the bitwise operators are the logical ones.
LOGICAL_OPS = {ast.BitAnd: op.logical_and, ast.BitOr: op.logical_or, ast.BitXor: op.logical_xor}
BITWISE = (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)
UNARY_OPS = {ast.USub: op.negative, ast.Invert: op.bitwise_not, ast.Not: op.logical_not}
PYTHON_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
                ast.Not: operator.not_}
COMPARE_OPS = {
    ast.Lt: op.less, ast.LtE: op.less_equal, ast.Gt: op.greater, ast.GtE: op.greater_equal,
    ast.Eq: op.equal, ast.NotEq: op.not_equal,
}
PYTHON_COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
BOOL_OPS = {ast.And: op.logical_and, ast.Or: op.logical_or}


def is_tensor(value):
    return isinstance(value, rx.Expr)


def dtype_of(value):
    return str(value.ty.dtype)


def is_float(dtype):
    return dtype.startswith(("float", "bfloat"))


def result_dtype(lhs, rhs):
    """The dtype torch gives `lhs <op> rhs`: tensors stand in as empty torch tensors of their dtype
    (0-d ones as 0-d: torch lets those promote less), numbers as themselves."""
    def stand_in(v):
        if not is_tensor(v):
            return v
        return torch.empty(() if v.ty.ndim == 0 else (1,), dtype=getattr(torch, dtype_of(v)))
    return str(torch.result_type(stand_in(lhs), stand_in(rhs))).removeprefix("torch.")


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
    def __init__(self, fn):
        super().__init__(fn)
        self.unnamed = set()  # bindings emitted for an operator that no assignment has named yet

    def emit(self, expr):
        """Bind each operator's result as soon as it is built: its type (shape, dtype) is known
        from then on, and the next operator needs it to pick dtypes."""
        var = RB.emit(expr)
        self.unnamed.add(var)
        return var

    # ---- values -----------------------------------------------------------------------------
    def visit_Constant(self, node):
        if type(node.value) not in (bool, int, float):
            raise self.error(node, f"constant {node.value!r} is not a number")
        return node.value  # a Python number until it meets a tensor

    def tensor(self, value, dtype=None):
        """A value as a Relax tensor of `dtype`: a number becomes a constant, a tensor is cast."""
        if is_tensor(value):
            return value if dtype is None or dtype == dtype_of(value) else self.emit(op.astype(value, dtype))
        if dtype is None:  # a number on its own: torch's defaults (torch.tensor(7) is int64)
            dtype = "bool" if type(value) is bool else "int64" if type(value) is int else "float32"
        return rx.const(value, dtype)

    def visit_Tuple(self, node):
        return rx.Tuple([self.tensor(self.visit(elt)) for elt in node.elts])

    def visit_Return(self, node):
        value = rx.Tuple([]) if node.value is None else self.visit(node.value)
        RB.func_ret_value(self.tensor(value))  # `return 7` returns a tensor too
        self.returned = True

    def visit_Assign(self, node):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise self.error(node, "only `name = value` assignments are supported")
        value = self.visit(node.value)
        name = node.targets[0].id
        if value in self.unnamed:  # not a parameter, nor a value some other name holds already
            IRBuilder.name(name, value)
            self.unnamed.discard(value)
        self.symbols[name] = value  # a Python number stays one: it may fold later

    # ---- operators --------------------------------------------------------------------------
    def visit_BinOp(self, node):
        lhs, rhs = self.visit(node.left), self.visit(node.right)
        kind = type(node.op)
        if kind not in BINARY_OPS:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        if not is_tensor(lhs) and not is_tensor(rhs):
            try:
                return PYTHON_BINARY[kind](lhs, rhs)  # folded: no IR for `2 * 3`
            except ZeroDivisionError:
                raise self.error(node, "division by zero") from None
        dtype = result_dtype(lhs, rhs)
        if kind in BITWISE:
            if is_float(dtype):
                raise self.error(node, f"`{ast.unparse(node)}`: bitwise operators need bool or integer tensors")
            if dtype == "bool":
                if kind not in LOGICAL_OPS:
                    raise self.error(node, "shifts need integer tensors")
                return self.emit(LOGICAL_OPS[kind](self.tensor(lhs, dtype), self.tensor(rhs, dtype)))
        elif dtype == "bool":
            raise self.error(node, f"`{ast.unparse(node)}`: arithmetic on bool tensors is not supported")
        if kind is ast.Div and not is_float(dtype):
            dtype = "float32"  # true division, as torch does for integer tensors
        if kind is ast.Pow and not is_float(dtype):
            wide = self.emit(op.power(self.tensor(lhs, "float64"), self.tensor(rhs, "float64")))
            return self.emit(op.astype(op.round(wide), dtype))
        return self.emit(BINARY_OPS[kind](self.tensor(lhs, dtype), self.tensor(rhs, dtype)))

    def visit_UnaryOp(self, node):
        value = self.visit(node.operand)
        kind = type(node.op)
        if not is_tensor(value):
            return PYTHON_UNARY[kind](value)
        dtype = dtype_of(value)
        if kind is ast.UAdd:
            return value
        if dtype == "bool" and kind is ast.Invert:
            return self.emit(op.logical_not(value))
        allowed = {ast.USub: dtype != "bool", ast.Not: dtype == "bool", ast.Invert: not is_float(dtype)}
        if not allowed[kind]:
            raise self.error(node, f"`{ast.unparse(node)}` is not defined on a {dtype} tensor")
        return self.emit(UNARY_OPS[kind](value))

    def compare(self, node, cmp, lhs, rhs):
        if not is_tensor(lhs) and not is_tensor(rhs):
            return PYTHON_COMPARE[type(cmp)](lhs, rhs)
        dtype = result_dtype(lhs, rhs)
        if dtype == "bool":
            dtype = "int8"  # see the comment at the top
        return self.emit(COMPARE_OPS[type(cmp)](self.tensor(lhs, dtype), self.tensor(rhs, dtype)))

    def visit_Compare(self, node):
        # a < b < c is (a < b) and (b < c), with b computed once.
        left = self.visit(node.left)
        result = None
        for cmp, right_node in zip(node.ops, node.comparators):
            if type(cmp) not in COMPARE_OPS:
                raise self.error(node, "only < <= > >= == != comparisons are supported")
            right = self.visit(right_node)  # computed once, though a chain uses it twice
            part = self.compare(node, cmp, left, right)
            result = part if result is None else self.logical(node, ast.And(), result, part)
            left = right
        return result

    def logical(self, node, kind, lhs, rhs):
        if not is_tensor(lhs) and not is_tensor(rhs):
            return (lhs and rhs) if isinstance(kind, ast.And) else (lhs or rhs)
        for v in (lhs, rhs):
            if (dtype_of(v) if is_tensor(v) else type(v).__name__) != "bool":
                raise self.error(node, "`and`/`or` need bool tensors; compare first, e.g. `(a > 0) and (b > 0)`")
        return self.emit(BOOL_OPS[type(kind)](self.tensor(lhs, "bool"), self.tensor(rhs, "bool")))

    def visit_BoolOp(self, node):
        result = self.visit(node.values[0])
        for value in node.values[1:]:
            result = self.logical(node, node.op, result, self.visit(value))
        return result


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator

    def __call__(self, *args):
        out = super().__call__(*args)
        if isinstance(out, tvm.runtime.Tensor):  # a 0-d result made from a Python number
            return torch.from_dlpack(out)
        if not isinstance(out, torch.Tensor):    # a tuple of results: a TVM Array
            return tuple(torch.from_dlpack(o) for o in out)
        return out


jit = JIT.decorator


def check_against_torch(jitted, inputs, reference=None):
    """Run the compiled function and a reference on torch tensors (by default its own Python body);
    every result and its dtype must agree. Returns how many results were compared."""
    ours = jitted(*map(Tensor.of, inputs))
    theirs = (reference or jitted.fn)(*inputs)
    ours, theirs = (ours, theirs) if isinstance(theirs, tuple) else ((ours,), (theirs,))
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs):
        want = torch.as_tensor(want)
        assert got.dtype == want.dtype, (jitted.fn.__name__, got.dtype, want.dtype)
        torch.testing.assert_close(got, want)
    return len(theirs)


if __name__ == "__main__":

    @jit
    def dtypes(h: Tensor((2, 3), "float16"), i: Tensor((2, 3), "int32")):
        scale = 2 * 1.25  # folds to 2.5 while compiling
        return h * scale, i + 1, i * 1.5, i + h, 7

    print("Relax for `dtypes` (constants take the dtype torch would give the result):")
    print(dtypes.codegen().script())

    @jit
    def arithmetic(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32"), w: Tensor((3, 4), "float32")):
        return a + b, a - b, a * b, a / b, a // b, a % b, a ** 2, b ** a, -a, +a, a @ w, 1 - a

    @jit
    def integers(i: Tensor((2, 3), "int32"), j: Tensor((2, 3), "int32")):
        return i + j, i - j, i * j, i / j, i // j, i % j, i ** 2, -i, i & j, i | j, i ^ j, ~i, i << 2, i >> 1

    @jit
    def comparisons(a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return a < b, a <= b, a > b, a >= b, a == b, a != b, a == 0.5

    @jit
    def bitwise_bools(p: Tensor((2, 3), "bool"), q: Tensor((2, 3), "bool")):
        return p & q, p | q, p ^ q, ~p, p == q, p < q

    # torch cannot run these bodies: Python's `not`, `and`, `or` and chained comparisons ask a
    # whole tensor for one truth value. Here they work element-wise; the references say what they mean.
    @jit
    def python_logic(p: Tensor((2, 3), "bool"), q: Tensor((2, 3), "bool"),
                     a: Tensor((2, 3), "float32"), b: Tensor((2, 3), "float32")):
        return not p, p and q, p or q, 0.25 < a < b

    def python_logic_reference(p, q, a, b):
        return ~p, p & q, p | q, (0.25 < a) & (a < b)

    a = torch.rand(2, 3)
    b = torch.rand(2, 3) + 0.5
    a[0, 0] = 0.5  # so that `a == 0.5` is True somewhere
    i = torch.tensor([[7, -7, 5], [0, 12, -3]], dtype=torch.int32)
    j = torch.tensor([[2, 2, -3], [5, -5, 2]], dtype=torch.int32)
    p = torch.tensor([[True, True, False], [False, True, False]])
    q = torch.tensor([[True, False, True], [False, True, True]])
    cases = [(dtypes, (torch.rand(2, 3).half(), i), None), (arithmetic, (a, b, torch.rand(3, 4)), None),
             (integers, (i, j), None), (comparisons, (a, b), None), (bitwise_bools, (p, q), None),
             (python_logic, (p, q, a, b), python_logic_reference)]
    checked = 0
    for jitted, inputs, reference in cases:
        count = check_against_torch(jitted, inputs, reference)
        checked += count
        print(f"{jitted.fn.__name__}: {count} results match torch, dtypes included")
    floor_div, modulo = integers(Tensor.of(i), Tensor.of(j))[4:6]
    print(f"{i.tolist()} // {j.tolist()} = {floor_div.tolist()}, and % gives {modulo.tolist()} (floored, as Python)")

    @jit
    def bad(p: Tensor((2, 3), "bool")):
        return -p

    try:
        bad.codegen()
        raise AssertionError("`-` on a bool tensor should be refused")
    except SyntaxError as err:
        print(f"\nrefused, as torch does: {err.msg}  ({err.text.strip()})")

    print("Checking: constants took their operands' dtypes, and every operator matched torch")
    script = dtypes.codegen().script()
    assert 'R.const(2.5, "float16")' in script and 'R.const(1, "int32")' in script
    assert 'R.astype(i, dtype="float16")' in script
    assert checked == 5 + 12 + 14 + 7 + 6 + 4
