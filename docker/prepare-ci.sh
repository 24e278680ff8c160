#!/usr/bin/env bash
# One entry point for CI (and a fresh developer machine) before the docker suites run:
#   - a Docker engine that answers (installs docker.io and starts dockerd when needed);
#   - the docker SDK in the project's Python;
#   - the CPU Triton test image mme-triton-cpu:test, the scikit-learn server image
#     mme-sklearn-serve:test (multi-container endpoints) and the emulator's own image
#     sagemaker-mme-emulator:local, both built from local material (no registry).
#
# Idempotent: a second run finds the engine up and the image current and takes seconds.
# Cold on a fresh Debian bookworm machine: about 3-4 minutes (see docker/README.md).
#
# Environment: MME_PYTHON (default: the project's .venv), plus those of setup-engine.sh and
# build-test-image.sh (MME_TEST_IMAGE, MME_TEST_IMAGE_PROFILE, MME_REBUILD...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=docker/lib.sh
source "$here/lib.sh"
started=$(date +%s)

bash "$here/setup-engine.sh"

if ! "$py" -c 'import docker' >/dev/null 2>&1; then
    echo "[prepare-ci] installing the docker SDK into $py" >&2
    "$py" -m pip install --quiet 'docker>=7'
fi

MME_PYTHON="$py" bash "$here/build-test-image.sh"
MME_PYTHON="$py" bash "$here/build-sklearn-image.sh"
MME_PYTHON="$py" bash "$here/build-emulator-image.sh"
echo "[prepare-ci] docker suites ready in $(( $(date +%s) - started ))s" >&2
