"""TVM's Schedule without its per-call argument type checks: s_tir's `type_checked` binds and checks
every argument of every schedule call in Python (32 us a `sch.get`, 3 us without), about a fifth of
compiling a small kernel. babytriton's rules pass TVM's own objects; a wrong one still fails in TVM's
C++ (an error the rule's wrapper, Guarded, turns into a decline)."""
from __future__ import annotations

from tvm import s_tir


class Schedule(s_tir.Schedule):
    """s_tir.Schedule, each of its type-checked methods called directly."""


for _name, _method in vars(s_tir.Schedule).items():
    if callable(_method) and hasattr(_method, "__wrapped__"):   # functools.wraps of type_checked
        setattr(Schedule, _name, _method.__wrapped__)
