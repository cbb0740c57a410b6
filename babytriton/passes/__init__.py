"""babytriton's own Relax passes, run by lowering/pipeline.py between TVM's: softmax decomposed, row
fusion, multi-output merging, online softmax, views and casts, shifts, in-place updates, offloading.
Imports codegen/, operators/ and the layers below, never schedules/ or anything above."""
