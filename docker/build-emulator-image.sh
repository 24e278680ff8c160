#!/usr/bin/env bash
# Build the emulator's own image (docker/Dockerfile) with no registry and no network in the
# build: a clean context (only what the package needs) plus docker/wheels filled by
# `pip download` on the host, installed with PIP_NO_INDEX=1.
#
# Idempotent like build-test-image.sh: the image carries a hash of its inputs (the package's
# files, the Dockerfile, the base) and is rebuilt only when they change (MME_REBUILD=1 rebuilds).
#
# Environment:
#   MME_EMULATOR_IMAGE       tag (default sagemaker-mme-emulator:local)
#   MME_EMULATOR_BASE_IMAGE  base (default: python:3.11-slim-bookworm when the engine has it,
#                            else the offline base mme-bookworm-python:base, built if needed)
#   MME_BUILD_DIR, MME_PYTHON, MME_REBUILD   as in build-test-image.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=docker/lib.sh
source "$here/lib.sh"
tag="${MME_EMULATOR_IMAGE:-sagemaker-mme-emulator:local}"
started=$(date +%s)

bash "$here/setup-engine.sh"

base="${MME_EMULATOR_BASE_IMAGE:-}"
if [ -z "$base" ]; then
    if docker image inspect python:3.11-slim-bookworm >/dev/null 2>&1; then
        base="python:3.11-slim-bookworm"
    else
        base="${MME_BASE_IMAGE:-mme-bookworm-python:base}"
        if ! docker image inspect "$base" >/dev/null 2>&1; then
            say "no python base image: building the offline one"
            MME_TEST_IMAGE_PROFILE=minimal bash "$here/build-test-image.sh"
        fi
    fi
fi

inputs_hash="$( {
    cd "$repo"
    find pyproject.toml README.md emulator ensembles harness mme docker/Dockerfile -type f \
        ! -path '*/__pycache__/*' ! -name '*.pyc' 2>/dev/null | LC_ALL=C sort | xargs sha256sum
    echo "$base $(docker image inspect --format '{{.Id}}' "$base")"
} | sha256sum | cut -c1-16)"

exit_if_built "$tag" "$label_key" "$inputs_hash" "$force" "$started"

ctx="$build_dir/emulator-context"
wheels="$build_dir/emulator-wheels"
rm -rf "$ctx"
mkdir -p "$ctx/docker" "$wheels"
(cd "$repo" && cp -r pyproject.toml emulator ensembles harness mme "$ctx/")
[ -f "$repo/README.md" ] && cp "$repo/README.md" "$ctx/"
find "$ctx" -name __pycache__ -type d -prune -exec rm -rf {} +
cp "$here/Dockerfile" "$ctx/docker/"

say "pip download the emulator's dependencies into $wheels"
# The package's runtime dependencies as pyproject declares them, plus the build backend.
"$py" - "$repo/pyproject.toml" >"$wheels/requirements.txt" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))
for requirement in project["project"]["dependencies"] + project["project"]["optional-dependencies"].get("docker", []):
    print(requirement)
for requirement in project["build-system"]["requires"]:
    print(requirement)
print("wheel")
PY
download_wheels "$wheels" "$wheels/requirements.txt"
link_into "$ctx/docker/wheels" "$wheels"/*.whl

say "docker build $tag (base $base)"
docker build --rm --force-rm -f "$ctx/docker/Dockerfile" --build-arg "BASE_IMAGE=$base" \
    --build-arg PIP_NO_INDEX=1 --label "$label_key=$inputs_hash" -t "$tag" "$ctx" \
    >"$build_dir/emulator-build.log" 2>&1 \
    || { tail -n 40 "$build_dir/emulator-build.log" >&2; exit 1; }
rm -rf "$ctx"
say "built $tag in $(( $(date +%s) - started ))s: $(image_size "$tag")"
