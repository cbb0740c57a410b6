# Chapter 18 - calling Relax's operator library: sigmoid, exp, sum, softmax, ...
#
# Exercise 5 of the tutorial, solved on chapter 13 alone: this file holds that
# answer and nothing else. exercises/18_library_calls.py is the same file with the answer
# taken out; `diff exercises/18_library_calls.py chapters/18_library_calls.py` shows it.
#
# What: `sigmoid(x)`, `relax.op.sum(x, axis=1, keepdims=True)` and
# `relax.op.nn.softmax(x)` inside a jitted function call the operator of
# that name from TVM's Relax library (`tvm.relax.op` and `tvm.relax.op.nn`,
# about 200 functions). A callee is found the way Python finds it, in the
# function's globals (so `from tvm.relax.op import sigmoid`, or
# `from tvm import relax` and then `relax.op.sum`, both work); a bare name
# Python does not know (`exp(x)`) is looked up in the library by name.
#
# Why: chapter 13 knows one operator, `+`; everything else a tensor program
# needs (products, exponentials, reductions, softmax, reshapes) Relax
# already has, with LegalizeOps rules that turn each one into TIR. So with
# library calls alone, `multiply(x, sigmoid(x))` and a row softmax can be
# written. Calling them costs the code generator one table and one rule for
# arguments: each op's Python signature says which parameters take tensors
# (annotated as Relax expressions), and those arguments are compiled as
# usual; the others take plain values (`axis=1`, `keepdims=True`,
# `"float16"`), written as literals, which the op gets as they are.
#
# The library's operators are Relax's, not torch's: `max(x, axis=1)` returns
# the values only, integer `divide` truncates.
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
from tvm.relax.op import exp, maximum, multiply, sigmoid, subtract
from tvm.script.ir_builder import relax as RB

ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor

# Every function of the operator library, by name.
LIBRARY = {name: fn for namespace in (relax.op, relax.op.nn) for name, fn in vars(namespace).items()
           if not name.startswith("_") and inspect.isfunction(fn)}
LIBRARY_FUNCTIONS = {id(fn) for fn in LIBRARY.values()}
EXPR = tvm.ir.Expr  # the annotation of parameters that take tensors


class CodeGenerator(ch13.JIT.CodeGenerator):  # last extended in chapter 10
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

    def call_library(self, node, op):
        """Bind the call's arguments to the op's signature: tensor parameters get compiled values,
        the others the literals written there (`axis=1`, `"float16"`)."""
        signature = inspect.signature(op)
        try:
            bound = signature.bind(*node.args, **{kw.arg: kw.value for kw in node.keywords})
        except TypeError as err:
            raise self.error(node, f"{op.__name__}{signature}: {err}") from None
        for name, arg in bound.arguments.items():
            if signature.parameters[name].annotation is EXPR:
                bound.arguments[name] = self.visit(arg)
            else:
                try:
                    bound.arguments[name] = ast.literal_eval(arg)
                except ValueError:
                    raise self.error(arg, f"{op.__name__}(): {name}= takes a value written out, "
                                          f"such as 1 or \"float16\"") from None
        try:  # bound now, so that TVM's checks of shapes, dtypes and attributes happen here
            return RB.emit(op(*bound.args, **bound.kwargs))
        except Exception as err:  # say so at the user's line
            message = str(err).strip().splitlines()[-1]
            raise self.error(node, f"{op.__name__}(): {message}") from None


class JIT(ch13.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


def kernels_called(mod, name):
    """The PrimFuncs a Relax function calls, in order."""
    return [binding.value.args[0].name_hint for block in mod[name].body.blocks for binding in block.bindings
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op)
            and binding.value.op.name == "relax.call_tir"]


# ---- Follow-up, beyond the lesson ------------------------------------------------------------
# - A Python number for a tensor parameter is chapter 13's constant (int32 or float32): `maximum(h, 0.5)`
#   with `h` float16 is refused by TVM. Chapter 14's rule (a number takes the dtype torch would give
#   the result) fixes that; the package applies it to library calls in babytriton/codegen/library.py.
# - The package also takes torch spellings (`dim=`, `torch.sigmoid`) and tensor methods (`x.sum()`).


if __name__ == "__main__":

    @jit
    def swish(x: Tensor((4, 8), "float32")):
        return multiply(x, sigmoid(x))

    mod = swish.codegen()
    print("Relax, as generated:")
    print(mod.script())
    lowered = swish.lower(mod)
    print("\nAfter the passes of chapter 13 (legalized, fused):")
    print(lowered.script())
    swish_kernels = kernels_called(lowered, "swish")

    @jit
    def softmax_rows(x: Tensor((4, 8), "float32")):
        shifted = subtract(x, relax.op.max(x, axis=1, keepdims=True))
        e = exp(shifted)
        return divide(e, relax.op.sum(e, axis=1, keepdims=True))  # noqa: F821 - found by name

    softmax_kernels = kernels_called(softmax_rows.lower(softmax_rows.codegen()), "softmax_rows")
    print("\nkernels of the row softmax after fusion:", softmax_kernels)

    def softmax(x: Tensor((4, 8), "float32")):
        return relax.op.nn.softmax(x, axis=-1)

    def clamp(x: Tensor((4, 8), "float32")):
        return maximum(x, 0.5)

    def relu(x: Tensor((4, 8), "float32")):
        return relax.op.nn.relu(subtract(x, 0.5))

    def column_means(x: Tensor((4, 8), "float32")):
        return relax.op.mean(x, axis=0)

    def halve(x: Tensor((4, 8), "float32")):
        return relax.op.astype(x, "float16")

    def hyperbolic(x: Tensor((4, 8), "float32")):
        return tanh(x)  # noqa: F821 - found by name

    x = torch.randn(4, 8)
    torch.testing.assert_close(swish(Tensor.of(x)), x * torch.sigmoid(x))
    torch.testing.assert_close(softmax_rows(Tensor.of(x)), torch.softmax(x, dim=1))
    more = {softmax: torch.softmax(x, dim=-1), clamp: torch.clamp(x, min=0.5), relu: torch.relu(x - 0.5),
            column_means: x.mean(dim=0), halve: x.half(), hyperbolic: torch.tanh(x)}
    for fn, expected in more.items():
        torch.testing.assert_close(jit(fn)(Tensor.of(x)), expected)
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
