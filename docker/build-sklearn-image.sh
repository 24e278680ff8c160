#!/usr/bin/env bash
# Build the scikit-learn inference server image (default tag mme-sklearn-serve:test) without any
# image registry, beside the CPU Triton test image and the same way:
#   - the base image mme-bookworm-python:base (debootstrap + docker import), which
#     build-test-image.sh makes; built here through it when missing;
#   - wheels fetched on the host with `pip download` for CPython 3.11 on glibc 2.36, installed in
#     the image with --no-index (the build has no network);
#   - docker build of docker/sklearn-serve/Dockerfile.
# scikit-learn is pinned to the host's version when the host has it, so a model pickled with
# joblib on the host loads in the container.
#
# Idempotent: the image carries a hash of its inputs and is rebuilt only when they change
# (FORCE=1 rebuilds anyway).
#
# Environment: MME_SKLEARN_IMAGE (tag), MME_BASE_IMAGE, MME_BUILD_DIR, MME_PYTHON, FORCE.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
tag="${MME_SKLEARN_IMAGE:-mme-sklearn-serve:test}"
base="${MME_BASE_IMAGE:-mme-bookworm-python:base}"
build_dir="${MME_BUILD_DIR:-/var/tmp/mme-docker-build}"
force="${FORCE:-0}"
label_key="com.sagemaker-mme-emulator.inputs"
if [ -n "${MME_PYTHON:-}" ]; then
    py="$MME_PYTHON"
elif [ -x "$repo/.venv/bin/python" ]; then
    py="$repo/.venv/bin/python"
else
    py="python3"
fi
say() { echo "[build-sklearn-image] $*" >&2; }
started=$(date +%s)

image_label() {
    docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

if [ -z "$(image_label "$base" "$label_key")" ]; then
    say "base image $base missing: building it with build-test-image.sh"
    MME_TEST_IMAGE_PROFILE=minimal bash "$here/build-test-image.sh"
fi

sklearn_pin="$("$py" -c 'import importlib.metadata as m; print("scikit-learn==" + m.version("scikit-learn"))' 2>/dev/null || echo "scikit-learn>=1.5")"
inputs_hash="$( {
    cat "$here/sklearn-serve/Dockerfile" "$here/sklearn-serve/serve" "$here/sklearn-serve/requirements.txt"
    echo "$sklearn_pin $(image_label "$base" "$label_key")"
} | sha256sum | cut -c1-16)"
if [ "$force" != 1 ] && [ "$(image_label "$tag" "$label_key")" = "$inputs_hash" ]; then
    say "$tag is up to date ($sklearn_pin); nothing to do in $(( $(date +%s) - started ))s"
    exit 0
fi

ctx="$build_dir/sklearn-serve-context"
wheels="$build_dir/wheels-sklearn"
rm -rf "$ctx"
mkdir -p "$ctx/wheels" "$wheels"
cp "$here/sklearn-serve/Dockerfile" "$here/sklearn-serve/serve" "$ctx/"
{ grep -v '^\s*#' "$here/sklearn-serve/requirements.txt" | grep -v '^\s*$' | grep -v '^scikit-learn$'
  echo "$sklearn_pin"; } >"$wheels/requirements.txt"
platforms=""
for minor in $(seq 36 -1 17); do platforms="$platforms --platform manylinux_2_${minor}_x86_64"; done
say "pip download ($sklearn_pin) into $wheels"
# shellcheck disable=SC2086
"$py" -m pip download --quiet --disable-pip-version-check --dest "$wheels" \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    $platforms --platform manylinux2014_x86_64 --platform any \
    -r "$wheels/requirements.txt" pip 2>&1 | { grep -v "^WARNING: Location '" || true; } >&2
cp -l "$wheels"/* "$ctx/wheels/" 2>/dev/null || cp "$wheels"/* "$ctx/wheels/"

say "docker build $tag (base $base)"
docker build --rm --force-rm --build-arg "BASE_IMAGE=$base" --label "$label_key=$inputs_hash" \
    -t "$tag" "$ctx" >"$build_dir/sklearn-build.log" 2>&1 \
    || { tail -n 40 "$build_dir/sklearn-build.log" >&2; exit 1; }
rm -rf "$ctx"
say "built $tag in $(( $(date +%s) - started ))s: $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')"
