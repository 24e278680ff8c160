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
# (MME_REBUILD=1 rebuilds anyway).
#
# Environment: MME_SKLEARN_IMAGE (tag), MME_BASE_IMAGE, MME_BUILD_DIR, MME_PYTHON, MME_REBUILD.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=docker/lib.sh
source "$here/lib.sh"
tag="${MME_SKLEARN_IMAGE:-mme-sklearn-serve:test}"
base="${MME_BASE_IMAGE:-mme-bookworm-python:base}"
started=$(date +%s)

if [ -z "$(image_label "$base" "$label_key")" ]; then
    say "base image $base missing: building it with build-test-image.sh"
    MME_TEST_IMAGE_PROFILE=minimal bash "$here/build-test-image.sh"
fi

sklearn_pin="$("$py" -c 'import importlib.metadata as m; print("scikit-learn==" + m.version("scikit-learn"))' 2>/dev/null || echo "scikit-learn>=1.5")"
inputs_hash="$( {
    cat "$here/sklearn-serve/Dockerfile" "$here/sklearn-serve/serve" "$here/sklearn-serve/requirements.txt"
    echo "$sklearn_pin $(image_label "$base" "$label_key")"
} | sha256sum | cut -c1-16)"
exit_if_built "$tag" "$label_key" "$inputs_hash" "$force" "$started" "$sklearn_pin"

ctx="$build_dir/sklearn-serve-context"
wheels="$build_dir/wheels-sklearn"
rm -rf "$ctx"
mkdir -p "$ctx/wheels" "$wheels"
cp "$here/sklearn-serve/Dockerfile" "$here/sklearn-serve/serve" "$ctx/"
{ grep -v '^\s*#' "$here/sklearn-serve/requirements.txt" | grep -v '^\s*$' | grep -v '^scikit-learn$'
  echo "$sklearn_pin"; } >"$wheels/requirements.txt"
say "pip download ($sklearn_pin) into $wheels"
download_wheels "$wheels" "$wheels/requirements.txt"
link_into "$ctx/wheels" "$wheels"/*

say "docker build $tag (base $base)"
docker build --rm --force-rm --build-arg "BASE_IMAGE=$base" --label "$label_key=$inputs_hash" \
    -t "$tag" "$ctx" >"$build_dir/sklearn-build.log" 2>&1 \
    || { tail -n 40 "$build_dir/sklearn-build.log" >&2; exit 1; }
rm -rf "$ctx"
say "built $tag in $(( $(date +%s) - started ))s: $(image_size "$tag")"
