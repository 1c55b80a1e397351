#!/usr/bin/env bash
# On a machine with CUDA GPUs: rewrite every example, validate it on the real GPU with the
# torch.profiler cross-check, and run the GPU-marked tests.  Results (JSON per example and a
# markdown summary, timed without the profiler) go to ${OUT:-gpu-results}/.  Takes well under a minute on one GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
python -c "import torch; print('cuda devices:', torch.cuda.device_count(), torch.cuda.get_device_name(0))"
for pte in examples/models/{mlp,transformer}_{copy,legacy}.pte examples/models/two_gpu_{copy,legacy}.pte; do
  name="$(basename "$pte" .pte)"
  [[ "$name" == two_gpu_* ]] && [[ "$(python -c 'import torch; print(torch.cuda.device_count())')" -lt 2 ]] && continue
  pte-devconst rewrite "$pte" -o "$out/$name.devconst.pte" > /dev/null
  pte-devconst validate "$pte" "$out/$name.devconst.pte" --inputs "examples/models/$name.inputs.pt" \
    --expected "examples/models/$name.expected.pt" --calls 20 --profile --format json > "$out/$name.json" || true
  pte-devconst validate "$pte" "$out/$name.devconst.pte" --inputs "examples/models/$name.inputs.pt" \
    --expected "examples/models/$name.expected.pt" --calls 20 --format markdown >> "$out/summary.md" || true  # timings without profiler overhead
done
python -m pytest -q -m gpu tests/test_runner_gpu.py | tee "$out/pytest-gpu.txt"
