#!/usr/bin/env bash
# Packs what a GPU machine with Python 3.12 and PyTorch but no network needs to run the emulator
# and its GPU check (docker/gpu-check.sh) into .gpu/ of this checkout (git-ignored):
#   .gpu/triton.tar.xz  the embedded Triton from this checkout's nvidia-pytriton (tritonserver,
#                       its libraries, the Python backend and the stub for that Python only);
#   .gpu/site.tar.xz    the emulator's own dependencies for that Python, less what the GPU
#                       machine already has (torch, grpcio, ...), botocore's models cut to the
#                       services the emulator and its clients use. numpy is always carried, at
#                       the project's pin (<2): Triton 2.51's Python backend answers
#                       "output tensor shape does not match size of output" for every output
#                       a model makes with numpy 2 (seen with numpy 2.5 on an H200 machine).
# Made on any Linux x86_64 machine with network access after `make setup`; the archives travel
# to the GPU machine with the checkout, and docker/gpu-check.sh unpacks them there.
#   bash docker/gpu-bundle.sh            # for Python 3.12 (the default)
#   GPU_PYTHON=3.11 bash docker/gpu-bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-3.12}
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
OUT=.gpu
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

echo "== the embedded Triton (nvidia-pytriton in $SITE), Python $PY stub only"
test -f "$SITE/pytriton/tritonserver/python_backend_stubs/$PY/triton_python_backend_stub" || {
  echo "nvidia-pytriton in .venv has no stub for Python $PY" >&2; exit 2; }
mkdir -p "$WORK/triton/pytriton/tritonserver/python_backend_stubs"
cp "$SITE/pytriton/__init__.py" "$WORK/triton/pytriton/"
for part in bin backends caches; do
  cp -a "$SITE/pytriton/tritonserver/$part" "$WORK/triton/pytriton/tritonserver/"
done
cp -a "$SITE/pytriton/tritonserver/python_backend_stubs/$PY" \
  "$WORK/triton/pytriton/tritonserver/python_backend_stubs/"
cp -a "$SITE/nvidia_pytriton.libs" "$WORK/triton/"
# Each stub links its own grafted libpython; keep only this Python's.
find "$WORK/triton/nvidia_pytriton.libs" -name 'libpython3-*' ! -name "libpython3-*.${PY#3.}.so*" -delete
find "$WORK/triton" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$WORK/triton" -cJf "$OUT/triton.tar.xz" .
ls -la "$OUT/triton.tar.xz"

echo "== the emulator's dependencies for CPython $PY (manylinux x86_64)"
# The emulator's runtime dependencies (pyproject.toml) as pip resolves them for that Python, less
# what the GPU machine has already (GPU_MACHINE_HAS: a CUDA image with PyTorch; nvidia-pytriton
# travels in triton.tar.xz).
GPU_MACHINE_HAS=${GPU_MACHINE_HAS:-"aiohttp aiosignal aiohappyeyeballs annotated-doc anyio attrs
  certifi charset-normalizer click frozenlist grpcio h11 idna ml-dtypes multidict packaging
  prometheus-client propcache protobuf psutil python-dateutil pyyaml requests six tqdm
  typing-extensions urllib3 uvloop yarl"}
PLATFORMS=(--only-binary=:all: --python-version "$PY" --implementation cp
           --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64)
mapfile -t REQUIRES < <(.venv/bin/python - <<'PYTHON'
import tomllib
for requirement in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    if not requirement.startswith("nvidia-pytriton"):
        print(requirement)
PYTHON
)
.venv/bin/python -m pip install -q --disable-pip-version-check --dry-run --ignore-installed \
  --report "$WORK/resolved.json" "${PLATFORMS[@]}" --target "$WORK/dry" "${REQUIRES[@]}" docker \
  2>&1 | grep -v "^WARNING: Location" || true
mapfile -t PINS < <(GPU_MACHINE_HAS="$GPU_MACHINE_HAS" .venv/bin/python - "$WORK/resolved.json" <<'PYTHON'
import json, os, re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
has = {norm(n) for n in os.environ["GPU_MACHINE_HAS"].split()}
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if norm(meta["name"]) not in has:
        print(f"{meta['name']}=={meta['version']}")
PYTHON
)
echo "carried: ${PINS[*]}"
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps "${PLATFORMS[@]}" \
  -d "$WORK/wheels" "${PINS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-compile \
  "${PLATFORMS[@]}" --target "$WORK/site" "$WORK"/wheels/*.whl 2>&1 \
  | grep -v "^WARNING: Location" || true
# botocore's models: only the services the emulator answers or calls, and what every client reads.
KEEP='^(sagemaker|sagemaker-runtime|cloudwatch|application-autoscaling|s3|sts|sns|iam)$'
for service in "$WORK/site/botocore/data"/*/; do
  name=$(basename "$service")
  [[ $name =~ $KEEP ]] || rm -rf "$service"
done
rm -rf "$WORK/site/bin" "$WORK/site/tritonclient/perf_analyzer" "$WORK/site/tritonclient/perf_client"
find "$WORK/site" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$WORK/site" -cJf "$OUT/site.tar.xz" .
ls -la "$OUT/site.tar.xz"
du -ch "$OUT"/*.tar.xz | tail -1
