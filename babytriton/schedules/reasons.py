"""Why a rule passes a kernel on. A rule that declines a kernel of the kind it schedules says why, in a
few words on the kernel's structure (`return decline("a symbolic size")`); its wrapper, Guarded, hears
it (`hearing`) and keeps it for the kernel. `k.fusion` shows what was said of each kernel that ended
on Dlight's Fallback, or on a CPU on no rule at all. A kernel of another kind is declined silently."""
from __future__ import annotations

import contextlib
import threading

_heard = threading.local()


def decline(reason: str) -> None:
    """Say why the running rule passes this kernel on. The first reason counts (a helper's, before its
    rule's); said outside `hearing` it goes nowhere. Returns None, what a declining rule returns."""
    reasons = getattr(_heard, "reasons", None)
    if reasons is not None and not reasons:
        reasons.append(reason)


@contextlib.contextmanager
def hearing():
    """While a rule runs on one kernel: the list of what it said (`decline`), empty or one reason."""
    before = getattr(_heard, "reasons", None)
    _heard.reasons = reasons = []
    try:
        yield reasons
    finally:
        _heard.reasons = before
