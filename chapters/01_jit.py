# Chapter 01 - a `jit` decorator that takes over a function
#
# What: `@jit` replaces a Python function with an object of our own. From now on,
# calling the name runs *our* code, not the function's body. Every later chapter
# grows what happens inside that call: parse the body, translate it to TVM's IR,
# compile it, run it.
#
# Why: a JIT compiler has to stand between the caller and the function. A
# decorator is Python's hook for that: `@jit` above `def f` means `f = jit(f)`,
# so whatever `jit` returns is what the rest of the program sees as `f`. We keep
# the original function around, because its source and annotations are the input
# to the compiler.
#
# What to look at: the output shows our wrapper announcing the call, and the
# Python body (which would print a line of its own) never running.
#
# Run: python chapters/01_jit.py


class JIT:
    """Stands in for a decorated function; later chapters compile `self.fn` instead of calling it."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        print(f"[jit] intercepted a call to {self.fn.__name__}{args}; its Python body does not run")


# A class is callable, so the class itself can serve as the decorator: `jit(f)` is `JIT(f)`.
jit = JIT


if __name__ == "__main__":
    body_ran = []

    @jit
    def hello():
        print("hello from the Python body")
        body_ran.append(True)

    print("hello is now:", hello)
    hello()

    print("Checking: the call went to the JIT object, and the original function was kept in .fn")
    assert isinstance(hello, JIT) and hello.fn.__name__ == "hello"
    assert body_ran == [], "the decorator should have taken over the call"
