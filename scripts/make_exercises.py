"""Write the exercise starters: chapters 14-27 with the answer taken out.

Each of chapters 14-21 solves one of the tutorial's eight exercises on chapter 13 alone; chapters 22 and 23
are the course's own exercises 9 (reverse-mode differentiation) and 10 (torch's names), on chapter 18; chapters 24-27
its exercises 11-14 (block kernels), on chapter 21, then each on the one before. Its starter,
exercises/<same name>.py, is the same file with the bodies of the functions that make up the answer
replaced by `raise NotImplementedError("exercise N (...): name")`; signatures and docstrings stay as
hints. So `diff exercises/16_if_else.py chapters/16_if_else.py` is the answer and nothing else.
tests/course/test_exercises.py checks that the starters are what this script writes.

    python scripts/make_exercises.py          # rewrite exercises/1[4-9]_*.py, exercises/2[0-7]_*.py
"""
import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# chapter -> (exercise number, what it asks, the functions whose bodies are the answer)
EXERCISES = {
    "14_operators": (1, "multiplication and the other operators", [
        "result_dtype", "CodeGenerator.visit_BinOp", "CodeGenerator.visit_UnaryOp", "CodeGenerator.compare",
        "CodeGenerator.visit_Compare", "CodeGenerator.logical", "CodeGenerator.visit_BoolOp"]),
    "15_meta_schedule": (2, "MetaSchedule instead of Dlight", ["JIT.tune", "JIT.sample"]),
    "16_if_else": (3, "if/else", ["CodeGenerator.visit_If", "CodeGenerator.branch"]),
    "17_for_loops": (4, "for loops", [
        "CodeGenerator.visit_For", "CodeGenerator.recursive_loop", "CodeGenerator.trip_count",
        "CodeGenerator.body_function", "CodeGenerator.halving_function"]),
    "18_library_calls": (5, "calling Relax's library", [
        "CodeGenerator.visit_Call", "CodeGenerator.callee", "CodeGenerator.call_library"]),
    "19_tir_calls": (6, "calling your own TensorIR", [
        "CodeGenerator.visit_Call", "CodeGenerator.call_kernel", "CodeGenerator.declare"]),
    "20_devices": (7, "CPU and GPU in one function", [
        "CodeGenerator.visit_With", "CodeGenerator.visit_BinOp", "CodeGenerator.on_device", "retarget"]),
    "21_tir_backend": (8, "a TensorIR code generator", [
        "TIRCodeGenerator.visit_For", "TIRCodeGenerator.visit_Assign", "TIRCodeGenerator.visit_Name",
        "TIRCodeGenerator.visit_Subscript", "TIRCodeGenerator.visit_BinOp"]),
    "22_autodiff": (9, "reverse-mode differentiation", ["vjp_function", "adjoints_of", "reverse_mode"]),
    "23_torch_names": (10, "torch's names on Relax's operators", [
        "transpose", "maximum_of", "CodeGenerator.visit_Call", "CodeGenerator.call_torch"]),
    "24_programs": (11, "a grid of programs", [
        "BlockCodeGenerator.program_loops", "BlockCodeGenerator.block_loops", "BlockCodeGenerator.combine",
        "BlockCodeGenerator.load", "BlockCodeGenerator.store"]),
    "25_block_reductions": (12, "reductions inside a block", [
        "BlockCodeGenerator.visit_Subscript", "BlockCodeGenerator.reduce", "BlockCodeGenerator.tree_steps"]),
    "26_dot_tiles": (13, "tiles and dot", [
        "BlockCodeGenerator.visit_Assign", "BlockCodeGenerator.write", "BlockCodeGenerator.dot"]),
    "27_autotune": (14, "the grid-stride loop and autotuning", [
        "BlockCodeGenerator.visit_For", "Autotuner.launch", "Autotuner.time"]),
}

FIND_CHAPTERS = [
    "import pathlib  # the starter's own lines: chapter {base} is in chapters/, beside exercises/",
    "import sys",
    'sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "chapters"))',
]


def functions(tree):
    """qualified name -> FunctionDef, for module-level functions and methods of module-level classes."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"{node.name}.{item.name}"] = item
    return found


def starter(stem):
    """The text of exercises/<stem>.py, made from chapters/<stem>.py."""
    number, what, names = EXERCISES[stem]
    source = (ROOT / "chapters" / f"{stem}.py").read_text()
    lines = source.split("\n")
    defs = functions(ast.parse(source))
    # Replace bodies from the bottom up, so that earlier line numbers stay valid.
    for name in sorted(names, key=lambda n: defs[n].lineno, reverse=True):
        node = defs[name]
        body = node.body
        has_doc = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str)
        first = body[1] if has_doc else body[0]
        indent = " " * first.col_offset
        stub = f'{indent}raise NotImplementedError("exercise {number} ({what}): {name}")'
        lines[first.lineno - 1:body[-1].end_lineno] = [stub]
    text = "\n".join(lines)
    title, rest = text.split("\n", 1)
    head, paragraph_end = rest.split("# Exercise ", 1)[0], rest.index("#\n# What")
    base = re.search(r'^ch\d\d = importlib.import_module\("((\d\d)_\w+)"\)$', source, re.MULTILINE)
    whose = "of the tutorial" if number <= 8 else "of the course, after the tutorial's eight"
    intro = (f"Exercise {number} {whose} ({what}), to solve on chapter {base.group(2)}. Fill in the functions "
             f"that raise NotImplementedError(\"exercise {number} ...\"); the comments below say what the "
             f"finished chapter does. Check your answer with `pytest exercises -k {stem}`; the solution is "
             f"chapters/{stem}.py, and `diff exercises/{stem}.py chapters/{stem}.py` shows it.")
    intro = textwrap.fill(intro, width=100, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False)
    text = (title.replace("# Chapter", "# Exercise starter for chapter") + "\n" + head + intro + "\n"
            + rest[paragraph_end:])
    text = text.replace(f"# Run: python chapters/{stem}.py", f"# Run: python exercises/{stem}.py")
    anchor = base.group(0)
    find = [line.format(base=base.group(2)) for line in FIND_CHAPTERS]
    return text.replace(anchor, "\n".join(find + [anchor]), 1)


def main():
    for stem in EXERCISES:
        path = ROOT / "exercises" / f"{stem}.py"
        path.write_text(starter(stem))
        print("wrote", path.relative_to(ROOT))


if __name__ == "__main__":
    sys.exit(main())
