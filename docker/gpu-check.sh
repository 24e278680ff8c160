#!/usr/bin/env bash
# The GPU path in one command, on a machine with an NVIDIA GPU: `mme gpu-check` (a KIND_GPU
# TorchScript model on CUDA through boto3, GPU memory budget and eviction, the 507 of a model too
# big for the GPU, GPUUtilization/GPUMemoryUtilization, GPU-vs-CPU timings) and the GPU tests
# (`pytest -m gpu`). Everything it prints is also written under $OUT (default ./gpu-check-out).
#
#   make setup && bash docker/gpu-check.sh      # a GPU runner with this checkout set up
#   bash docker/gpu-check.sh                    # a GPU machine with no network: run
#                                               # docker/gpu-bundle.sh elsewhere first; the
#                                               # .gpu/ archives it writes are unpacked into a
#                                               # virtual environment over this machine's
#                                               # python3 (which has torch), and it runs all
# Exit code: 0 when every check and test passed, else the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-$REPO/gpu-check-out}
mkdir -p "$OUT"
CHECK_TIMEOUT=${GPU_CHECK_TIMEOUT:-300}
TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-240}

if [[ -x .venv/bin/python ]]; then
  PY=.venv/bin/python
elif [[ -f .gpu/triton.tar.xz && -f .gpu/site.tar.xz ]]; then
  BUNDLE=$(mktemp -d /tmp/mme-gpu.XXXXXX)
  trap 'rm -rf "$BUNDLE"' EXIT
  # A virtual environment, not PYTHONPATH: Triton's Python stub ignores PYTHONPATH and finds
  # its packages from the first python3 on PATH (the emulator puts its own first), so the
  # bundle's packages (numpy<2 above all) must be that Python's; the machine's own packages
  # (torch) follow them through a .pth file.
  python3 -m venv --without-pip "$BUNDLE/venv" || exit 2
  PY=$BUNDLE/venv/bin/python
  SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tar -C "$SITE" -xJf .gpu/triton.tar.xz
  tar -C "$SITE" -xJf .gpu/site.tar.xz
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' >"$SITE/gpu-machine.pth"
  export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
  echo "unpacked docker/gpu-bundle.sh's archives into $BUNDLE/venv over $(command -v python3)"
else
  echo "no .venv (make setup) and no .gpu/ archives (bash docker/gpu-bundle.sh)" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1

{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  "$PY" -c 'import sys, numpy, torch; print("python", sys.version.split()[0], "| numpy", numpy.__version__, "| torch", torch.__version__, "| cuda", torch.version.cuda, "| sees GPU:", torch.cuda.is_available())' || true
  "$PY" -c 'import sysconfig, os; p = os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")); print("this Python'"'"'s libpython:", p, "(present)" if os.path.isfile(p) else "(absent: the stub uses the wheel'"'"'s)")' || true
  "$PY" - <<'PY' || true
from emulator.triton.embedded import find_tritonserver, pytriton_root
import subprocess, sys
binary = find_tritonserver()
stub = pytriton_root() / "tritonserver" / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}" / "triton_python_backend_stub"
for path in (binary, stub):
    missing = [l.strip() for l in subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout.splitlines() if "not found" in l]
    print(path.name, "libraries:", "all found" if not missing else missing)
PY
} 2>&1 | tee "$OUT/machine.txt"

status=0
echo "== mme gpu-check"
timeout --kill-after=10 "$CHECK_TIMEOUT" "$PY" -m mme.gpu_check --report "$OUT/gpu-check.json" \
  >"$OUT/gpu-check.log" 2>&1
code=$?
grep -E '^(PASS|FAIL) |checks passed|^mme gpu-check' "$OUT/gpu-check.log"
((code == 124)) && echo "mme gpu-check: stopped after ${CHECK_TIMEOUT} s"
((code != 0)) && status=$code

echo "== pytest -m gpu"
timeout --kill-after=10 "$TEST_TIMEOUT" "$PY" -m pytest -m gpu -p no:cacheprovider -rs -q \
  tests/integration/test_gpu.py >"$OUT/pytest-gpu.log" 2>&1
code=$?
tail -n 25 "$OUT/pytest-gpu.log"
((code != 0 && status == 0)) && status=$code
exit $status
