#!/usr/bin/env bash
# Build the CPU Triton test image (default tag mme-triton-cpu:test) without any image registry:
#   1. a base image: debootstrap --variant=minbase bookworm (python3 3.11, libpython3.11,
#      python3-numpy) turned into an image with `docker import`;
#   2. a build context holding the nvidia-pytriton wheel's tritonserver, its libraries, the Python
#      backend and the 3.11 stub, plus wheels fetched with `pip download` on the host;
#   3. docker build of docker/triton-cpu/Dockerfile with --build-arg BASE_IMAGE.
#
# Idempotent and fast on a second run: each image carries a label with a hash of its inputs and
# is rebuilt only when they change (MME_REBUILD=1 rebuilds anyway).
#
# Environment:
#   MME_TEST_IMAGE          tag to build (default mme-triton-cpu:test)
#   MME_TEST_IMAGE_PROFILE  minimal (numpy only: enough for Python models) or full (default: adds
#                           what the bundled ensembles and backend shims need, see
#                           docker/triton-cpu/requirements-ensembles.txt)
#   MME_BASE_IMAGE          base tag (default mme-bookworm-python:base)
#   MME_BUILD_DIR           scratch folder (default /var/tmp/mme-docker-build)
#   MME_DEBIAN_MIRROR       debootstrap mirror (default http://deb.debian.org/debian)
#   MME_PYTHON              Python whose nvidia-pytriton and pip are used (default: the
#                           project's .venv, else python3)
#   MME_REBUILD=1           rebuild both images (FORCE=1, its former name, still works)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=docker/lib.sh
source "$here/lib.sh"
tag="${MME_TEST_IMAGE:-mme-triton-cpu:test}"
profile="${MME_TEST_IMAGE_PROFILE:-full}"
base="${MME_BASE_IMAGE:-mme-bookworm-python:base}"
mirror="${MME_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
started=$(date +%s)

case "$profile" in
    minimal) requirements=("$here/triton-cpu/requirements.txt") ;;
    full) requirements=("$here/triton-cpu/requirements.txt" "$here/triton-cpu/requirements-ensembles.txt") ;;
    *) say "MME_TEST_IMAGE_PROFILE must be minimal or full, not '$profile'"; exit 2 ;;
esac

bash "$here/setup-engine.sh"

# --- 1. the base image -------------------------------------------------------------------------
base_inputs="bookworm minbase python3,libpython3.11,python3-numpy v1"
base_hash="$(printf '%s' "$base_inputs" | sha256sum | cut -c1-16)"
if [ "$force" != 1 ] && [ "$(image_label "$base" "$label_key")" = "$base_hash" ]; then
    say "base image $base is up to date"
else
    if ! command -v debootstrap >/dev/null 2>&1; then
        say "installing debootstrap"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    rootfs="$build_dir/rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs"
    say "debootstrap bookworm into $rootfs (about a minute)"
    debootstrap --variant=minbase --include=python3,libpython3.11,python3-numpy \
        bookworm "$rootfs" "$mirror" >"$build_dir/debootstrap.log" 2>&1 \
        || { tail -n 30 "$build_dir/debootstrap.log" >&2; exit 1; }
    # Keep the image small: no package lists, no downloaded .debs.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    say "docker import -> $base"
    tar -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change "LABEL $label_key=$base_hash" \
        --change 'CMD ["/bin/bash"]' \
        - "$base" >/dev/null
    rm -rf "$rootfs"
fi

# --- 2. the build context ----------------------------------------------------------------------
site="$("$py" -c 'import os, pytriton; print(os.path.dirname(os.path.dirname(pytriton.__file__)))')"
pytriton_version="$("$py" -c 'import importlib.metadata as m; print(m.version("nvidia-pytriton"))')"
triton_dir="$site/pytriton/tritonserver"
libs_dir="$site/nvidia_pytriton.libs"
stub="$triton_dir/python_backend_stubs/3.11/triton_python_backend_stub"
[ -x "$stub" ] || { say "no Python 3.11 backend stub at $stub (nvidia-pytriton missing?)"; exit 1; }

inputs_hash="$( {
    cat "$here/triton-cpu/Dockerfile" "${requirements[@]}"
    echo "$profile $pytriton_version $base_hash"
} | sha256sum | cut -c1-16)"

exit_if_built "$tag" "$label_key" "$inputs_hash" "$force" "$started" "profile $profile"

ctx="$build_dir/triton-cpu-context"
wheels="$build_dir/wheels-$profile"
rm -rf "$ctx"
mkdir -p "$ctx/tritonserver/bin" "$ctx/tritonserver/lib" "$ctx/tritonserver/backends" "$wheels"
cp "$here/triton-cpu/Dockerfile" "$ctx/"
cp "$triton_dir/bin/tritonserver" "$ctx/tritonserver/bin/"
cp -r "$triton_dir/caches" "$ctx/tritonserver/"
cp "$libs_dir"/* "$ctx/tritonserver/lib/"
mkdir -p "$ctx/tritonserver/backends/python"
cp "$triton_dir/backends/python/libtriton_python.so" \
   "$triton_dir/backends/python/triton_python_backend_utils.py" \
   "$ctx/tritonserver/backends/python/"
cp "$stub" "$ctx/tritonserver/backends/python/triton_python_backend_stub"

say "pip download (profile $profile) into $wheels"
cat "${requirements[@]}" | grep -v '^\s*#' | grep -v '^\s*$' >"$wheels/requirements.txt"
download_wheels "$wheels" "$wheels/requirements.txt"
link_into "$ctx/wheels" "$wheels"/*

say "docker build $tag (base $base)"
docker build --rm --force-rm --build-arg "BASE_IMAGE=$base" --label "$label_key=$inputs_hash" \
    --label "com.sagemaker-mme-emulator.profile=$profile" \
    --label "com.sagemaker-mme-emulator.pytriton=$pytriton_version" \
    -t "$tag" "$ctx" >"$build_dir/docker-build.log" 2>&1 \
    || { tail -n 40 "$build_dir/docker-build.log" >&2; exit 1; }
rm -rf "$ctx"
say "built $tag in $(( $(date +%s) - started ))s: $(image_size "$tag")"
