"""From Relax to a built module: the pass pipeline (TVM's passes and ours, the schedules applied,
tvm.build) and the lighter NVRTC prologue. Imports passes/, schedules/ and below."""
