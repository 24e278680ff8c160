#!/usr/bin/env bash
# Build the emulator's own image (docker/Dockerfile) with no registry and no network in the
# build: a clean context (only what the package needs) plus docker/wheels filled by
# `pip download` on the host, installed with PIP_NO_INDEX=1.
#
# Idempotent like build-test-image.sh: the image carries a hash of its inputs (the package's
# files, the Dockerfile, the base) and is rebuilt only when they change (FORCE=1 rebuilds).
#
# Environment:
#   MME_EMULATOR_IMAGE       tag (default sagemaker-mme-emulator:local)
#   MME_EMULATOR_BASE_IMAGE  base (default: python:3.11-slim-bookworm when the engine has it,
#                            else the offline base mme-bookworm-python:base, built if needed)
#   MME_BUILD_DIR, MME_PYTHON, FORCE   as in build-test-image.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
tag="${MME_EMULATOR_IMAGE:-sagemaker-mme-emulator:local}"
build_dir="${MME_BUILD_DIR:-/var/tmp/mme-docker-build}"
force="${FORCE:-0}"
label_key="com.sagemaker-mme-emulator.inputs"
started=$(date +%s)
say() { echo "[build-emulator-image] $*" >&2; }

# pip matches explicit --platform tags exactly: list every manylinux up to bookworm's glibc 2.36.
platform_flags() {
    local minor
    for minor in $(seq 36 -1 17); do printf -- '--platform manylinux_2_%s_x86_64 ' "$minor"; done
    printf -- '--platform manylinux2014_x86_64 --platform any'
}

if [ -n "${MME_PYTHON:-}" ]; then py="$MME_PYTHON"
elif [ -x "$repo/.venv/bin/python" ]; then py="$repo/.venv/bin/python"
else py="python3"; fi

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

current="$(docker image inspect --format "{{ index .Config.Labels \"$label_key\" }}" "$tag" \
    2>/dev/null || true)"
if [ "$force" != 1 ] && [ "$current" = "$inputs_hash" ]; then
    say "$tag is up to date; nothing to do in $(( $(date +%s) - started ))s"
    exit 0
fi

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
"$py" -m pip download --quiet --disable-pip-version-check --dest "$wheels" \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    $(platform_flags) \
    -r "$wheels/requirements.txt" pip 2>&1 | { grep -v "^WARNING: Location '" || true; } >&2
mkdir -p "$ctx/docker/wheels"
cp -l "$wheels"/*.whl "$ctx/docker/wheels/" 2>/dev/null || cp "$wheels"/*.whl "$ctx/docker/wheels/"

say "docker build $tag (base $base)"
docker build --rm --force-rm -f "$ctx/docker/Dockerfile" --build-arg "BASE_IMAGE=$base" \
    --build-arg PIP_NO_INDEX=1 --label "$label_key=$inputs_hash" -t "$tag" "$ctx" \
    >"$build_dir/emulator-build.log" 2>&1 \
    || { tail -n 40 "$build_dir/emulator-build.log" >&2; exit 1; }
rm -rf "$ctx"
say "built $tag in $(( $(date +%s) - started ))s: $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')"
