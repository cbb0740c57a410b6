"""A compiled function at run time: Kernel (calling through the Relax VM, its stages, fusion map and
graph), the disk cache and the CPU threads. Imports lowering/ and below."""
