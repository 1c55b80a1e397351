#!/usr/bin/env bash
# On a machine with CUDA GPUs: rewrite every example, validate it on the real GPU with the
# torch.profiler cross-check, and run the GPU-marked tests.  Results (JSON per example and a
# markdown summary, timed without the profiler) go to ${OUT:-gpu-results}/.  Takes well under a minute on one GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
work="$(mktemp -d)"  # rewritten programs stay out of $out: only the reports come back
trap 'rm -rf "$work"' EXIT
# A GPU machine often has torch, typer, rich and flatbuffers but not this tool: install it from this checkout.
command -v pte-devconst > /dev/null || python -m pip install --quiet --no-deps --no-build-isolation -e .
python -c "import torch; print('cuda devices:', torch.cuda.device_count(), torch.cuda.get_device_name(0))"
failed=()
for pte in examples/models/{mlp,transformer}_{copy,legacy}.pte examples/models/two_gpu_{copy,legacy}.pte; do
  name="$(basename "$pte" .pte)"
  [[ "$name" == two_gpu_* ]] && [[ "$(python -c 'import torch; print(torch.cuda.device_count())')" -lt 2 ]] && continue
  pte-devconst rewrite "$pte" -o "$work/$name.devconst.pte" > /dev/null
  pte-devconst validate "$pte" "$work/$name.devconst.pte" --inputs "examples/models/$name.inputs.pt" \
    --expected "examples/models/$name.expected.pt" --calls 20 --profile --format json > "$out/$name.json" || failed+=("$name (profiled)")
  pte-devconst validate "$pte" "$work/$name.devconst.pte" --inputs "examples/models/$name.inputs.pt" \
    --expected "examples/models/$name.expected.pt" --calls 20 --format markdown >> "$out/summary.md" || failed+=("$name")  # timings without profiler overhead
done
python -m pytest -q -m gpu tests/test_runner_gpu.py | tee "$out/pytest-gpu.txt"
if ((${#failed[@]})); then echo "validate FAILED: ${failed[*]}" >&2; exit 1; fi
