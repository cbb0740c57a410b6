"""The bridge from the 2024 article's TVM to TVM 0.27: every new form in the rename table of
chapters/README.md runs here, against the installed TVM. One test per row, keyed by the row's
"TVM 0.27" cell; a row without its test (or a test without its row) fails the first test."""
import ast
import importlib
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

ROOT = Path(__file__).resolve().parents[2]


def rename_table():
    """The README's rename table: the "TVM 0.27" cell of each row."""
    text = (ROOT / "chapters" / "README.md").read_text()
    section = text.split("## From the article's TVM (2024) to TVM 0.27", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.split(r"(?<!\\)\|", row)[2].strip() for row in rows]


@T.prim_func(s_tir=True, private=True)
def double(a: T.Buffer((T.int64(2), T.int64(3)), "float32"), out: T.Buffer((T.int64(2), T.int64(3)), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i, j in T.grid(T.int64(2), T.int64(3)):
        with T.sblock("out"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = a[vi, vj] * T.float32(2.0)


@I.ir_module
class AddModule:
    @R.function
    def main(a: R.Tensor((2, 3), "float32"), b: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
        return R.add(a, b)


def add_on_cuda():
    """AddModule, legalized, scheduled by Dlight and built for sm_90 (no GPU needed)."""
    from tvm.s_tir import dlight as dl
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    mod = relax.transform.LegalizeOps()(AddModule)
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(mod)
    return mod, tvm.compile(mod, target=target)


def run_on_cpu(executable, *arrays):
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(a) for a in arrays)).numpy()


def check_dlight():
    mod, _ = add_on_cuda()
    assert 'thread="threadIdx.x"' in mod.script()


def check_meta_schedule():
    from tvm.s_tir import meta_schedule as ms
    assert callable(ms.relax_integration.tune_relax) and ms.TuneContext is not None


def check_tirx():
    assert isinstance(double, tvm.tirx.PrimFunc)
    size = double.params[0].ty.shape[0]  # the buffer's first size, as chapter 19 reads it
    assert isinstance(size, tvm.tirx.IntImm) and int(size) == 2


def check_script_tirx():
    assert "T.sblock" in double.script() and isinstance(double, tvm.tirx.PrimFunc)


def check_sblock():
    assert 'with T.sblock("out"):' in double.script()


def check_sblock_alloc_buffer():
    fused = _fuse(relax.transform.LegalizeOps()(tvm.IRModule({"main": _two_adds()})))
    assert "T.sblock_alloc_buffer(" in fused.script()


def _two_adds():
    bb = relax.BlockBuilder()
    a = relax.Var("a", R.Tensor((2, 3), "float32"))
    with bb.function("main", [a]):
        with bb.dataflow():
            b = bb.emit(relax.op.add(a, a))
            c = bb.emit_output(relax.op.add(b, a))
        bb.emit_func_output(c)
    return bb.get()["main"]


def _fuse(mod):
    for p in (relax.transform.AnnotateTIROpPattern(), relax.transform.FuseOps(), relax.transform.FuseTIR()):
        mod = p(mod)
    return mod


def check_expr_ty():
    size = double.params[0].ty.shape[0]
    assert str(size.ty) == "int64" and not hasattr(size, "dtype")
    assert str((tvm.tirx.FloatImm("float32", 1.0) * 2).ty) == "float32"


def check_tirx_attributes():
    assert '"tirx.noalias": True' in double.script()
    mod, _ = add_on_cuda()
    assert "tirx.is_scheduled" in mod.script()


def check_ir_builder_tirx():
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as TB
    with IRBuilder() as ib:
        with TB.prim_func():
            TB.func_name("fill")
            buf = TB.arg("x", TB.buffer((4,), "float32"))
            with TB.serial(0, 4) as i:
                TB.buffer_store(buf, tvm.tirx.FloatImm("float32", 1.0), [i])
    assert isinstance(ib.get(), tvm.tirx.PrimFunc)


def check_compile():
    executable = tvm.compile(AddModule, target="llvm")
    a, b = np.ones((2, 3), "float32"), np.full((2, 3), 2, "float32")
    np.testing.assert_array_equal(run_on_cpu(executable, a, b), a + b)
    assert callable(relax.build)


def check_out_ty():
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((2, 3), "float32"))
    with bb.function("main", [x]):
        gv = bb.add_func(double, "double")
        out = bb.emit(relax.op.call_tir(gv, [x], out_ty=R.Tensor((2, 3), "float32")))
        bb.emit_func_output(out)
    mod = bb.get()
    assert "R.call_tir(cls.double, (x,), out_ty=R.Tensor((2, 3), dtype=\"float32\"))" in mod.script()
    a = np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_array_equal(run_on_cpu(tvm.compile(mod, target="llvm"), a), a * 2)


def check_ty():
    x = relax.Var("x", relax.TensorType([2, 3], "float32"))
    assert isinstance(x.ty, relax.TensorType) and str(x.ty.dtype) == "float32" and x.ty.ndim == 2


def check_inspect_source():
    _, executable = add_on_cuda()
    source = executable.mod.imports[0].imports[0].inspect_source()
    assert '__global__' in source and "add_kernel" in source


def check_runtime_tensor():
    value = tvm.runtime.tensor(np.arange(3, dtype="float32"))
    assert isinstance(value, tvm.runtime.Tensor)
    np.testing.assert_array_equal(value.numpy(), np.arange(3, dtype="float32"))


def check_from_dlpack():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    view = tvm.runtime.from_dlpack(t)
    assert isinstance(view, tvm.runtime.Tensor) and tuple(view.shape) == (2, 3)
    t[0, 0] = 42  # no copy: the TVM tensor sees torch's write
    assert view.numpy()[0, 0] == 42


def check_device():
    assert tvm.device("cuda", 0) == tvm.cuda(0) and str(tvm.device("cuda", 0)) == "cuda:0"
    assert tvm.device("cpu", 0) == tvm.cpu(0)


def check_ast_unparse():
    node = ast.parse("def f(a: Tensor((2, 3), 'float32')): pass").body[0].args.args[0].annotation
    assert ast.unparse(node) == "Tensor((2, 3), 'float32')"
    # what the article did with the annotation's text: evaluate it where `Tensor` is defined
    assert eval(ast.unparse(node), {"Tensor": lambda shape, dtype: (shape, dtype)}) == ((2, 3), "float32")


CHECKS = {
    "`from tvm.s_tir import dlight as dl`": check_dlight,
    "`from tvm.s_tir import meta_schedule as ms`": check_meta_schedule,
    "`tvm.tirx` (`tvm.tirx.PrimFunc`, `tvm.tirx.IntImm`)": check_tirx,
    "`from tvm.script import tirx as T`; `@T.prim_func(s_tir=True)` for code with blocks": check_script_tirx,
    '`with T.sblock("name"):`': check_sblock,
    '`expr.ty` (`str(expr.ty)` is `"int64"`)': check_expr_ty,
    "`T.sblock_alloc_buffer`": check_sblock_alloc_buffer,
    '`{"tirx.noalias": True}`, `"tirx.is_scheduled"`': check_tirx_attributes,
    "`from tvm.script.ir_builder import tirx`": check_ir_builder_tirx,
    "`tvm.compile(mod, target)` (`relax.build` remains, for Relax modules)": check_compile,
    "`out_ty=`: `R.call_tir(f, args, out_ty=R.Tensor(...))`, `relax.op.call_tir(f, args, out_ty)`": check_out_ty,
    "`var.ty`, `relax.TensorType`": check_ty,
    "`ex.mod.imports[0].imports[0].inspect_source()`": check_inspect_source,
    "`tvm.runtime.tensor(a)`, the class `tvm.runtime.Tensor`": check_runtime_tensor,
    "`tvm.runtime.from_dlpack(t)`": check_from_dlpack,
    '`tvm.device("cuda", 0)`': check_device,
    "`ast.unparse(node)` (Python 3.9+)": check_ast_unparse,
}


def test_every_row_of_the_rename_table_has_its_check():
    assert rename_table() == list(CHECKS)


@pytest.mark.parametrize("new_form", list(CHECKS), ids=[f.__name__.removeprefix("check_") for f in CHECKS.values()])
def test_the_new_form_runs(new_form):
    CHECKS[new_form]()


def test_the_old_forms_are_gone():
    """The renames are real: the 2024 spellings fail on the installed TVM."""
    for module in ("tvm.dlight", "tvm.meta_schedule", "tvm.tir", "tvm.script.tir"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(module)
    assert not hasattr(T, "block") and not hasattr(tvm, "nd") and not hasattr(tvm.runtime, "NDArray")
    assert not hasattr(relax, "TensorStructInfo") and not hasattr(tvm.runtime.Module, "get_source")
    assert not hasattr(tvm.runtime.Module, "imported_modules") and not hasattr(tvm.runtime.Device, "STR2MASK")
    assert "out_sinfo" not in inspect.signature(relax.op.call_tir).parameters


OLD_SPELLINGS = ['"tir.noalias"', '"tir.is_scheduled"', "T.block(", "out_sinfo", ".get_source(", "imported_modules",
                 "tvm.nd.", "ndarray", "from tvm import dlight", "from tvm import meta_schedule", "tvm.tir.",
                 "import tir as", "struct_info", "STR2MASK", "astunparse", "relax.build("]


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_no_chapter_uses_a_2024_spelling_in_its_code(path):
    """Comments may name the old spellings (to point at the article); code uses the 0.27 ones."""
    code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    assert [old for old in OLD_SPELLINGS if old in code] == []
