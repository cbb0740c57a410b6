"""Tools for testing babytriton itself: the differential fuzzer (`babytriton.testing.fuzz`), ulp distances (`ulp`)."""
