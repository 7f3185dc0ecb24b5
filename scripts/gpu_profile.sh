#!/usr/bin/env bash
# One paper's gpu profile on a CUDA machine, offline: installs the engine's dependencies from
# the wheel folder `make gpu-wheels` built (dist/gpu-wheels, carried with the checkout; never
# torch: the machine's own CUDA build is used) and this checkout without its dependencies, then
# runs `studio-engine reproduce SLUG --profile gpu` on the GPU within 9 minutes and writes the
# claim, the log and the report (HTML, PDF, JSON, forest plot) under $OUT.
#
#   scripts/gpu_profile.sh SLUG          (from anywhere; OUT defaults to ./gpu-out)
#
# Environment: OUT (results), PYTHON (default python3, the one holding CUDA torch),
# GPU_WHEELS (default dist/gpu-wheels), GPU_PROFILE_TIMEOUT_S (default 540), SHARED (a copy of
# ../shared for the papers that read its data, linked beside the checkout when that is absent).
# Exit: reproduce's own code (0 PASS, 3 FAIL, 4 INCONCLUSIVE, 1 failed), 124 when it ran out of
# time, 2 when the wheel folder is missing.
set -euo pipefail

slug="${1:?usage: scripts/gpu_profile.sh SLUG}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheels="${GPU_WHEELS:-$root/dist/gpu-wheels}"
out="${OUT:-$root/gpu-out}"
python="${PYTHON:-python3}"
timeout_s="${GPU_PROFILE_TIMEOUT_S:-540}"
workspace="$(mktemp -d /tmp/studio-gpu-workspace.XXXXXX)"

if [[ ! -f "$wheels/requirements.txt" ]]; then
    echo "gpu_profile: $wheels/requirements.txt is missing: run 'make gpu-wheels' where pip" \
         "can download, and carry dist/gpu-wheels with the checkout" >&2
    exit 2
fi
if ! grep -qx "$slug" "$wheels/papers.txt" 2>/dev/null; then
    echo "gpu_profile: warning: $wheels was not built for $slug" \
         "(make gpu-wheels PAPERS=$slug); trying anyway" >&2
fi
if [[ -n "${SHARED:-}" && ! -e "$root/../shared" ]]; then
    ln -s "$(cd "$SHARED" && pwd)" "$root/../shared"
fi
mkdir -p "$out"

"$python" -m pip install -q --no-index --no-deps --find-links "$wheels" \
    -r "$wheels/requirements.txt"
"$python" -m pip install -q --no-index --no-deps --no-build-isolation -e "$root" \
    || "$python" -m pip install -q --no-index --no-deps --no-build-isolation "$root"
"$python" -c 'import torch; print("torch", torch.__version__, "cuda",
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")'

status=0
STUDIO_WORKSPACE="$workspace" PYTHONUNBUFFERED=1 timeout -k 15 "$timeout_s" \
    "$python" -m engine reproduce "$slug" --profile gpu --device cuda --json \
    > "$out/claim.json" 2> "$out/log.txt" || status=$?
echo "gpu_profile: reproduce $slug --profile gpu exited $status (log: $out/log.txt)"
if [[ $status -eq 0 || $status -eq 3 || $status -eq 4 ]]; then
    # four files (index.html, report.pdf, report.json, the forest plot): the run's own
    # figures stay in the workspace, as a device's $OUT brings back few files
    "$python" -m engine report "$slug" --out "$out/report" --max-figures 0 \
        --workspace "$workspace"
fi
exit "$status"
