#!/usr/bin/env bash
# The GPU tests on the GPU machine, each file in a process of its own (a CUDA error poisons the
# process's context, and every later test there fails with it), 8 at a time, the corpus file, the
# largest, over 8 workers; all of it within GPU_TESTS_SECONDS (default 300: a device call has 600, and
# a per-file limit alone let 8-wide batches of files run far past it). Prints the files that did not
# pass and the failures; the logs go to $OUT/gpu_tests.tgz (a device call returns 8 files, not 100).
# From the project root with `.gpu` carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -c "import tvm" 2>/dev/null || source .gpu/setup.sh
OUT=${OUT:-/tmp/gpu_tests_out}; logs="$OUT/gpu_tests"; mkdir -p "$logs"
export END=$(( $(date +%s) + ${GPU_TESTS_SECONDS:-300} )) LOGS="$logs"
files=$(find tests -name 'test_*.py' -not -path 'tests/course/*' -not -name test_torch_corpus.py | sort)
timeout $(( END - $(date +%s) )) python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu \
    tests/codegen/pytorch/test_torch_corpus.py > "$logs/test_torch_corpus.py.log" 2>&1 &
echo $files | tr ' ' '\n' | xargs -P 8 -I{} sh -c 'left=$(( END - $(date +%s) )); [ $left -gt 0 ] &&
    timeout $left python3 -m pytest -q -p no:cacheprovider -n 0 -m gpu -k "not meta_schedule" {} \
    > "$LOGS/$(basename {}).log" 2>&1'
wait
for f in "$logs"/*.log; do echo "$(basename "$f" .log): $(tail -1 "$f")"; done | grep -v " passed in \| no tests ran\|deselected in"
echo "--- not reached: $(( $(echo $files | wc -w) + 1 - $(ls "$logs" | wc -l) )) files"
grep -h "^FAILED\|^ERROR" "$logs"/*.log | head -60
tar -czf "$OUT/gpu_tests.tgz" -C "$OUT" gpu_tests && rm -rf "$logs"
