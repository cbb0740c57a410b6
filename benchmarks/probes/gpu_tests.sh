#!/usr/bin/env bash
# The GPU tests on the GPU machine, each file in a process of its own (a CUDA error poisons the
# process's context, and every later test there fails with it), logs under $OUT/gpu_tests/; the corpus
# file, the largest, over 8 workers. From the project root with `.gpu` carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -c "import tvm" 2>/dev/null || source .gpu/setup.sh
OUT=${OUT:-/tmp/gpu_tests_out}; mkdir -p "$OUT/gpu_tests"
files=$(find tests -name 'test_*.py' -not -path 'tests/course/*' -not -name test_torch_corpus.py | sort)
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/codegen/pytorch/test_torch_corpus.py > "$OUT/gpu_tests/test_torch_corpus.py.log" 2>&1 &
echo $files | tr ' ' '\n' | xargs -P 8 -I{} sh -c "timeout 200 python3 -m pytest -q -p no:cacheprovider -n 0 -m gpu -k 'not meta_schedule' {} > $OUT/gpu_tests/\$(basename {}).log 2>&1"
wait
for f in "$OUT"/gpu_tests/*.log; do echo "$(basename "$f" .log): $(tail -1 "$f")"; done | grep -v " passed in \| no tests ran\|deselected in" ; echo "---"
grep -h "^FAILED" "$OUT"/gpu_tests/*.log | head -60
