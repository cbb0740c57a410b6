#!/usr/bin/env bash
# One GPU-machine call for a session's checks: the GPU tests of the files named (default: those the
# session touched), then the perf fuzzer's failing programs again with synchronous launches (so that an
# error names its kernel). Usage, from the project root with `.gpu` carried:
#   bash benchmarks/probes/gpu_check.sh "tests/test_a.py tests/test_b.py" p76,p154
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -c "import tvm" 2>/dev/null || source .gpu/setup.sh
OUT=${OUT:-/tmp/gpu_check_out}; mkdir -p "$OUT"
tests=${1:-}
failing=${2:-}
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
if [ -n "$tests" ]; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu -k "not meta_schedule" $tests 2>&1 | tail -25
fi
if [ -n "$failing" ]; then
  CUDA_LAUNCH_BLOCKING=1 BABYTRITON_DEBUG=1 timeout 100 python3 benchmarks/perf_fuzz.py --device gpu --n 200 --seed 0 \
    --only "$failing" --jobs 0 --no-compile --workdir /tmp/gpu_check_fails 2>&1 | tail -40
fi
