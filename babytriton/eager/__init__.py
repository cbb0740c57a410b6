"""The eager reference: a @jit function run op by op in torch (reference.py), through the same
operator rules as the compiler (ops.py). Imports lowering/, codegen/ and below."""
