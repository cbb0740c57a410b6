# Chapter 18 - calling Relax's operator library: sigmoid, exp, sum, softmax, ...
#
# What: `sigmoid(x)`, `relax.op.sum(x, axis=1, keepdims=True)` and
# `relax.op.nn.softmax(x)` inside a jitted function call the operator of
# that name from TVM's Relax library (`tvm.relax.op` and `tvm.relax.op.nn`,
# about 200 functions). A callee is found the way Python finds it, in the
# function's globals (so `from tvm.relax.op import sigmoid`, or
# `from tvm import relax` and then `relax.op.sum`, both work); a bare name
# Python does not know (`exp(x)`) is looked up in the library by name.
#
# Why: the operators of chapter 14 cover arithmetic; everything else a
# tensor program needs (exponentials, reductions, softmax, reshapes) Relax
# already has, with LegalizeOps rules that turn each one into TIR. Calling
# them costs the code generator one table and one rule for arguments:
# each op's Python signature says which parameters take tensors (annotated
# as Relax expressions) and which take plain values (`axis`, `keepdims`,
# `dtype`). A Python number given for a tensor parameter becomes a constant
# of the dtype it would get meeting the first tensor argument, as in
# chapter 14 (`maximum(x, 0.5)` makes `0.5` a float32 constant for a float32
# x; `where(cond, x, 0.0)` skips the bool condition and meets x).
#
# The library's operators are Relax's, not torch's: `max(x, axis=1)` returns
# the values only, integer `divide` truncates. The package does more (torch
# spellings such as `dim=`, tensor methods like `x.sum()`, dtype rules for
# bool and integer tensors); this chapter keeps to the mechanism.
#
# What to look at: `R.sigmoid(x)` in the Relax of `swish`, then the single
# kernel `fused_tir_sigmoid_multiply` that LegalizeOps and fusion made of it
# and the multiply (its first loop computes `T.sigmoid`). In the row
# softmax, the kernels after fusion: the two reductions (max, sum) are
# kernels of their own, the elementwise subtract and exp between them fuse
# into one, and the divide is the last. (`relax.op.nn.softmax` is a single
# operator with a legalization of its own.)
#
# Run: python chapters/18_library_calls.py
import ast
import difflib
import importlib
import inspect

import torch
import tvm
from tvm import relax
from tvm.relax.op import exp, maximum, sigmoid

ch17 = importlib.import_module("17_for_loops")
Tensor = ch17.Tensor
is_tensor = ch17.is_tensor
result_dtype = ch17.ch16.ch15.ch14.result_dtype

# Every function of the operator library, by name.
LIBRARY = {name: fn for namespace in (relax.op, relax.op.nn) for name, fn in vars(namespace).items()
           if not name.startswith("_") and inspect.isfunction(fn)}
LIBRARY_FUNCTIONS = {id(fn) for fn in LIBRARY.values()}
EXPR = tvm.ir.Expr  # the annotation of parameters that take tensors


class CodeGenerator(ch17.JIT.CodeGenerator):  # last extended in chapter 17
    def visit_Call(self, node):
        callee = self.callee(node.func)
        if id(callee) in LIBRARY_FUNCTIONS:
            return self.call_library(node, callee)
        raise self.error(node, f"cannot call `{ast.unparse(node.func)}`: only Relax operators "
                               "(tvm.relax.op, tvm.relax.op.nn) can be called here")

    def callee(self, func):
        """The Python object a call's function expression names: a global, an attribute of one, or an
        operator of the library found by its name."""
        if isinstance(func, ast.Name):
            if func.id in self.fn.__globals__:
                return self.fn.__globals__[func.id]
            if func.id in LIBRARY:
                return LIBRARY[func.id]
            hint = difflib.get_close_matches(func.id, LIBRARY, n=1)
            raise self.error(func, f"name {func.id!r} is not defined, nor an operator of the library"
                                   + (f"; did you mean {hint[0]!r}?" if hint else ""))
        if isinstance(func, ast.Attribute):
            owner = self.callee(func.value)
            if not hasattr(owner, func.attr):
                raise self.error(func, f"`{ast.unparse(func.value)}` has no attribute {func.attr!r}")
            return getattr(owner, func.attr)
        raise self.error(func, "only named functions can be called")

    def argument(self, node):
        """An argument's value; strings (dtype names, "float16") are only allowed here."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return self.visit(node)

    def call_library(self, node, op):
        """Bind the call's arguments to the op's signature; tensor parameters get tensors (numbers
        become constants of the promoted dtype), the others get Python values."""
        args = [self.argument(arg) for arg in node.args]
        kwargs = {kw.arg: self.argument(kw.value) for kw in node.keywords}
        signature = inspect.signature(op)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise self.error(node, f"{op.__name__}{signature}: {err}") from None
        tensor_params = [p.name for p in signature.parameters.values() if p.annotation is EXPR]
        tensors = [v for name, v in bound.arguments.items() if name in tensor_params and is_tensor(v)]
        # numbers meet the first tensor that is not a condition: `where(c, x, 0.0)` meets x, not c
        like = next((t for t in tensors if ch17.dtype_of(t) != "bool"), tensors[0] if tensors else None)
        for name, value in bound.arguments.items():
            if name in tensor_params and not is_tensor(value):
                if type(value) not in (bool, int, float):
                    raise self.error(node, f"{op.__name__}(): parameter {name!r} takes a tensor, got {value!r}")
                bound.arguments[name] = self.tensor(value, None if like is None else result_dtype(like, value))
        try:
            return self.emit(op(*bound.args, **bound.kwargs))
        except Exception as err:  # TVM checks shapes, dtypes and attributes: say so at the user's line
            message = str(err).strip().splitlines()[-1]
            raise self.error(node, f"{op.__name__}(): {message}") from None


class JIT(ch17.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


if __name__ == "__main__":

    @jit
    def swish(x: Tensor((4, 8), "float32")):
        return x * sigmoid(x)

    mod = swish.codegen()
    print("Relax, as generated:")
    print(mod.script())
    lowered = swish.lower(mod)
    print("\nAfter the passes of chapter 13 (legalized, fused):")
    print(lowered.script())
    swish_kernels = ch17.ch16.kernels_called(lowered, "swish")

    @jit
    def softmax_rows(x: Tensor((4, 8), "float32")):
        shifted = x - relax.op.max(x, axis=1, keepdims=True)
        e = exp(shifted)
        return e / relax.op.sum(e, axis=1, keepdims=True)

    @jit
    def assorted(x: Tensor((4, 8), "float32")):
        return relax.op.nn.softmax(x, axis=-1), maximum(x, 0.5), relax.op.nn.relu(x - 0.5), \
            relax.op.mean(x, axis=0), relax.op.astype(x, "float16"), tanh(x)  # noqa: F821 - found by name

    softmax_kernels = ch17.ch16.kernels_called(softmax_rows.lower(softmax_rows.codegen()), "softmax_rows")
    print("\nkernels of the row softmax after fusion:", softmax_kernels)

    x = torch.randn(4, 8)
    torch.testing.assert_close(swish(Tensor.of(x)), x * torch.sigmoid(x))
    torch.testing.assert_close(softmax_rows(Tensor.of(x)), torch.softmax(x, dim=1))
    want = (torch.softmax(x, dim=-1), torch.clamp(x, min=0.5), torch.relu(x - 0.5), x.mean(dim=0), x.half(),
            torch.tanh(x))
    for got, expected in zip(assorted(Tensor.of(x)), want):
        torch.testing.assert_close(got, expected)
    print("swish, the row softmax and six more library calls match torch.")

    @jit
    def typo(x: Tensor((4, 8), "float32")):
        return sigmod(x)  # noqa: F821 - the mistake is the point

    try:
        typo.codegen()
        raise AssertionError("an unknown name should be refused")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: sigmoid became R.sigmoid, then one fused kernel with the multiply")
    assert "R.sigmoid(x)" in mod.script()
    assert swish_kernels == ["fused_tir_sigmoid_multiply"]
    assert softmax_kernels == ["max", "fused_subtract_tir_exp", "sum", "divide"]
