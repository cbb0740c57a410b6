"""The tutorial chapters, run the way a reader runs them: each file on its own, in a fresh Python.

A chapter passes when it exits cleanly (its closing asserts held) and its output shows the artefact
its lesson is about. Chapters 11-13, 15, 20 and 22 need no GPU: without one they build for CUDA and say so.
"""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import build_book  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))

# Chapter number -> what its output must contain.
ARTEFACTS = {
    "01": ["intercepted a call to hello"],
    "02": ["FunctionDef(", "name='add_one'", "op=Add()", "IndentationError"],
    "03": ["target='cpu'", "target='gpu'", "refused: target must be one of"],
    "04": ["FunctionDef name='add_one'", "    Assign", "visited 15 nodes; ast.walk finds 15"],
    "05": ["@I.ir_module", "class Module:"],
    "06": ["def nothing() -> R.Tuple:", "return R.tuple()", "does not support Assign"],
    "07": ['one: R.Tensor((), dtype="int32") = R.const(1, "int32")', "result: R.Tensor", "R.add(one"],
    "08": ["@one_plus_one:", "call  add", "array(2, dtype=int32)"],
    "09": ["the TVM view reads 42.0", "cannot hold data of shape (3, 3)",
           "tensor(2, dtype=torch.int32)"],
    "10": ["R.add(a, b)", "@T.prim_func", "T.grid(T.int64(2), T.int64(3))", "R.call_tir(cls.add"],
    "11": ['thread="blockIdx.x"', 'thread="threadIdx.x"', "tirx.is_scheduled"],
    "12": ['extern "C" __global__', "add_kernel(", "threadIdx.x"],
    "13": ["after ConvertToDataflow", "after LegalizeOps", "after AnnotateTIROpPattern", "after FuseOps",
           "after FuseTIR", "def fused_add_add(", "fused_add_add_kernel(", "matches torch"],
    "14": ['R.const(2.5, "float16")', 'R.astype(i, dtype="float16")', "integers: 14 results match torch",
           "python_logic: 4 results match torch", "is not defined on a bool tensor"],
    # 15 tunes for real (4 trials on the CPU, built and timed in-process): 10-25 s here, most of it imports.
    # (its fastest CPU candidate may be serial: waking the sleeping pool costs more than 32x32x32)
    "15": ["MetaSchedule measured 4 CPU candidates", "The tuned TIR for the CPU", "CUDA schedule by Dlight",
           "CUDA schedule by MetaSchedule", "threads per block", "__shared__"],
    "16": ["if flag:", "if_z_u: R.Tuple", "with R.dataflow():", "else:", "kernels called:",
           "only assigned in one branch"],
    "17": ["def loop0_body(", "def loop0(", "if one_left:", "if loop0_runs:", "run-time counts 0, 1, 2, 7 and 5000",
           "give it its final type before the loop"],
    "18": ["R.sigmoid(x)", "def fused_tir_sigmoid_multiply(", "six more library calls match torch",
           "did you mean 'sigmoid'?"],
    "19": ["R.call_tir(cls.scale_add, (x, y)", "def fused_scale_add_add(", "Both versions match torch",
           "but argument 2 is a float32 tensor of shape (8, 4)"],
    "20": ['vdevice="cuda', "x_gpu", "h_cpu", "_cuda_kernel", "add_llvm"],
    "21": ["acc: T.float32", "for k in range(3):", "T.exp(", "match torch",
           "only assigned in the body of the loop"],
    "22": ["def swish_scale_vjp(", "R.sum(lv1, axis=None", "def swish_scale_vjp_grad(", "R.collapse_sum_to(",
           "Our walk matches torch.autograd", 'gv_adjoint: R.Tensor((), dtype="float32") = R.ones(',
           "w_adjoint_out", "kernels of the backward after chapter 13's fusion: ['",
           "The compiled backward matches torch.autograd"],
    "23": ["R.permute_dims(k, axes=[1, 0])", "R.nn.softmax(", "R.argmax(x, axis=1", "match torch",
           "refused: `torch.cumsum` has no rule in this chapter's torch table"],
    "24": ["for pid0 in T.parallel(grid0):", "for i in T.vectorized(128):", "T.if_then_else(pid0 * 128 + i < n",
           "the last one masked) matches torch", "blockIdx.x", "threadIdx.x",
           "refused: cannot call `torch.exp` in a kernel"],
    "25": ["max0 = T.alloc_buffer((128,))", "max0[i] = T.max(max0[i], max0[i + 64])", "sum1[i] = sum1[i] + sum1[i + 1]",
           "/ sum1[0]", "37 x 100 matrix (rows of 100 in blocks of 128) matches torch", "sums along axis 1",
           "__shared__ alignas(64) float max0", "__syncthreads();", "refused: arange's size is 100"],
    "26": ["for pid1 in range(grid1):", "acc = T.alloc_buffer((16, 16))", "for k in range((K + 15) // 16):",
           "for kk, i in T.grid(16, 16):", "acc[i, j] = acc[i, j] + dot0[i, j]", "4 x 3 programs, matches torch",
           "blockIdx.y", "refused: dot multiplies an (M, K) block by a (K, N) block"],
    # 27 times its configs: the times and the choice differ from run to run
    "27": ["for trip in range(", "pid0 * 64 + trip * (grid0 * 64) + i < n", "n = 5 alike: both match torch",
           "microseconds per launch by config", "{'BLOCK': 1024}: ", "chosen: {'BLOCK': ",
           "the same choice, 3 compilations in all"],
}


def chapter_id(path):
    return path.stem


def run(path, cwd):
    # Runs once per session: tests/course/test_book.py renders the same runs (scripts/build_book.py).
    return build_book.run_chapter(path, cwd)


def test_the_chapters_are_numbered_in_order():
    assert [p.name[:2] for p in CHAPTERS] == sorted(ARTEFACTS)


@pytest.mark.parametrize("path", CHAPTERS, ids=chapter_id)
def test_chapter_runs_and_prints_its_artefact(path):
    result = run(path, ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    for artefact in ARTEFACTS[path.name[:2]]:
        assert artefact in result.stdout, f"{path.name} did not print {artefact!r}"


def test_a_chapter_runs_from_inside_the_chapters_folder():
    result = run(ROOT / "chapters" / "10_tensor_params.py", ROOT / "chapters")
    assert result.returncode == 0, result.stderr[-4000:]


def imported_modules(tree):
    """Every module a chapter imports, by statement or by `importlib.import_module("...")`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.module or ""
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
            yield ast.literal_eval(node.args[0])


@pytest.mark.parametrize("path", CHAPTERS, ids=chapter_id)
def test_chapter_shape(path):
    """Opens with its comment block, extends the chapter before it (and not the package), and its demo
    ends on an assert. Chapters 14-21 solve the tutorial's exercises, each on chapter 13 alone, so that
    `diff chapters/13_fusion.py chapters/16_if_else.py` is one exercise's answer and nothing else; chapter
    22 (differentiation) and 23 (torch's names), after the exercises, build on chapter 18's library calls;
    the block chapters on chapter 21's TIR back end (24), then each on the one before (25-27)."""
    source = path.read_text()
    tree = ast.parse(source)
    assert source.startswith(f"# Chapter {path.name[:2]} - ")
    imported = list(imported_modules(tree))
    assert not [name for name in imported if name.split(".")[0] == "babytriton"]
    chapters = [name for name in imported if name[:2].isdigit()]
    index = CHAPTERS.index(path)
    base = (CHAPTERS[index - 1].stem if path.name >= "25" else "21_tir_backend" if path.name >= "24"
            else "18_library_calls" if path.name >= "22" else "13_fusion" if path.name >= "14"
            else CHAPTERS[index - 1].stem if index else None)
    assert chapters == ([base] if base else [])
    main = [node for node in tree.body
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    assert len(main) == 1 and isinstance(main[0].body[-1], ast.Assert)
