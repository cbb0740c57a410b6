# Exercise starter for chapter 23 - a foreign vocabulary: torch's names mapped onto Relax's operators
#
# After the exercises, on chapter 18 (library calls): this chapter lets the
# chapter compiler read code written with torch's names, `torch.softmax(x,
# dim=-1)`, `x.exp().sum(dim=1)`, `F.silu(x)`, the way babytriton's `@jit`
# takes PyTorch code as it is written.
#
# Exercise 10 of the course, after the tutorial's eight (torch's names on Relax's operators), to
# solve on chapter 18. Fill in the functions that raise NotImplementedError("exercise 10 ..."); the
# comments below say what the finished chapter does. Check your answer with `pytest exercises -k
# 23_torch_names`; the solution is chapters/23_torch_names.py, and `diff exercises/23_torch_names.py
# chapters/23_torch_names.py` shows it.
#
# What: a front end whose users write in another library's vocabulary does not
# need a new IR. It needs a table: each foreign name, mapped to a *rule* that
# builds the meaning from the IR's own operators. Most rules only rename
# arguments (torch's `dim` is Relax's `axis`, `keepdim` is `keepdims`); some
# compute an argument (`transpose(x, 0, 1)` is `permute_dims` with the two
# axes swapped, which needs x's rank); some build more than one operator,
# because the same spelling means more in torch: `x.max(dim=1)` is a pair,
# the maximum values *and* their indices, where Relax's `max` is the values
# alone. A tensor method is the same rule with the tensor as its first
# argument (`x.exp()` is `torch.exp(x)`), so methods cost one more table
# from method names to functions. Dynamo and Helion do exactly this, at a far
# larger scale: a torch function is a key, its lowering is the value.
#
# Why a table and not `if name == ...`: the table is the list of what is
# supported, a name that is not in it is refused with a clear message (not
# silently compiled as something else), and the package's eager reference
# can run the same rules on torch values to check the compiler.
#
# What to look at: in the Relax of `scores`, `R.permute_dims(k, axes=[1,
# 0])` (the transpose rule computed the axes), `R.matmul` and
# `R.nn.softmax(..., axis=-1)` (`dim` renamed). In `row_max`, one torch call
# became two Relax operators, `R.max` and `R.argmax`, returned as a tuple:
# torch's answer. Then a torch name the table lacks, refused at its line.
#
# Run: python exercises/23_torch_names.py
import ast
import importlib

import torch
import torch.nn.functional as F
from tvm import relax
from tvm.script.ir_builder import relax as RB

import pathlib  # the starter's own lines: chapter 18 is in chapters/, beside exercises/
import sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))
ch18 = importlib.import_module("18_library_calls")
Tensor = ch18.Tensor


def renamed(relax_op, **names):
    """A torch function that is `relax_op` with some arguments named otherwise (dim -> axis)."""
    def rule(*args, **kwargs):
        return relax_op(*args, **{names.get(key, key): value for key, value in kwargs.items()})
    return rule


def transpose(input, dim0, dim1):
    """torch.transpose swaps two axes: Relax's permute_dims with the axes listed in full."""
    raise NotImplementedError("exercise 10 (torch's names on Relax's operators): transpose")


def maximum_of(input, dim=None, keepdim=False):
    """torch.max: the whole tensor's maximum, or along `dim` the (values, indices) pair."""
    raise NotImplementedError("exercise 10 (torch's names on Relax's operators): maximum_of")


# torch's name -> the rule that builds its meaning from Relax's operators
TORCH = {
    torch.exp: relax.op.exp, torch.sigmoid: relax.op.sigmoid, torch.tanh: relax.op.tanh,
    torch.matmul: relax.op.matmul, torch.transpose: transpose, torch.max: maximum_of,
    torch.sum: renamed(relax.op.sum, dim="axis", keepdim="keepdims"),
    torch.mean: renamed(relax.op.mean, dim="axis", keepdim="keepdims"),
    torch.softmax: renamed(relax.op.nn.softmax, dim="axis"), F.softmax: renamed(relax.op.nn.softmax, dim="axis"),
    F.silu: relax.op.nn.silu, F.relu: relax.op.nn.relu,
}
TORCH_RULES = {id(fn): rule for fn, rule in TORCH.items()}
# tensor method name -> the torch function it stands for, the tensor its first argument
METHODS = {"exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "matmul": torch.matmul,
           "transpose": torch.transpose, "max": torch.max, "sum": torch.sum, "mean": torch.mean,
           "softmax": torch.softmax}


class CodeGenerator(ch18.CodeGenerator):
    def visit_Call(self, node):
        raise NotImplementedError("exercise 10 (torch's names on Relax's operators): CodeGenerator.visit_Call")

    def is_tensor_expression(self, node):
        """A name the function bound, or a call (whose result is a tensor here)."""
        return isinstance(node, ast.Name) and node.id in self.symbols or isinstance(node, ast.Call)

    def call_torch(self, node, fn, args):
        """Compile the arguments (names of tensors) or read them (literals), then run fn's rule."""
        raise NotImplementedError("exercise 10 (torch's names on Relax's operators): CodeGenerator.call_torch")

    def argument(self, arg):
        """A tensor (a name the function bound, or a call that computes one) or a literal (`dim=-1`)."""
        if self.is_tensor_expression(arg):
            return self.visit(arg)
        try:
            return ast.literal_eval(arg)
        except ValueError:
            raise self.error(arg, "takes a tensor or a value written out, such as 1 or -1") from None


class JIT(ch18.JIT):
    CodeGenerator = CodeGenerator


jit = JIT.decorator


# ---- Follow-up, beyond the lesson ------------------------------------------------------------
# - Rules here build Relax directly. The package's rules (babytriton/codegen/pytorch/) build through a
#   builder instead, so its eager reference runs the same rule on torch tensors; they also follow
#   torch's dtypes (torch.exp of an int tensor is float32), check every argument, and cover indexing,
#   in-place updates and about 300 names.


if __name__ == "__main__":

    @jit
    def scores(q: Tensor((4, 8), "float32"), k: Tensor((6, 8), "float32")):
        return torch.softmax(torch.matmul(q, k.transpose(0, 1)), dim=-1)

    mod = scores.codegen()
    print("Relax of torch.softmax(torch.matmul(q, k.transpose(0, 1)), dim=-1):")
    print(mod.script())

    @jit
    def row_max(x: Tensor((4, 8), "float32")):
        return x.max(dim=1)

    print("Relax of x.max(dim=1):")
    print(row_max.codegen().script())

    @jit
    def exp_sums(x: Tensor((4, 8), "float32")):
        return x.exp().sum(dim=1, keepdim=True)

    @jit
    def activations(x: Tensor((4, 8), "float32")):
        return F.silu(torch.tanh(x))

    q, k, x = torch.randn(4, 8), torch.randn(6, 8), torch.randn(4, 8)
    torch.testing.assert_close(scores(Tensor.of(q), Tensor.of(k)), torch.softmax(q @ k.T, dim=-1))
    values, indices = (torch.from_dlpack(t) for t in row_max(Tensor.of(x)))  # a tuple comes back as TVM's
    torch.testing.assert_close(values, x.max(dim=1).values)
    torch.testing.assert_close(indices, x.max(dim=1).indices)
    torch.testing.assert_close(exp_sums(Tensor.of(x)), x.exp().sum(dim=1, keepdim=True))
    torch.testing.assert_close(activations(Tensor.of(x)), F.silu(torch.tanh(x)))
    print(f"scores, row_max, exp_sums and activations match torch ({len(TORCH)} torch names, "
          f"{len(METHODS)} methods in the table).")

    @jit
    def scan(x: Tensor((4, 8), "float32")):
        return torch.cumsum(x, dim=1)

    try:
        scan.codegen()
        raise AssertionError("a name outside the table should be refused")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: transpose became permute_dims, dim became axis, max(dim) two operators")
    text = mod.script()
    assert "R.permute_dims(k, axes=[1, 0])" in text and "R.nn.softmax(" in text and "axis=-1" in text
    assert "R.argmax(x, axis=1" in row_max.codegen().script()
