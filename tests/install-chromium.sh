#!/usr/bin/env bash
# Debian's chromium for the live page's browser tests (tests/integration/test_page.py), driven
# by playwright with executable_path: never a browser of playwright's own download.
#
# Idempotent: does nothing when chromium is installed. Where it cannot install (not root, no
# apt-get), it says why and exits 0: the browser tests then skip locally, and fail under CI=true.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "[install-chromium] no apt-get here: install Debian's chromium by hand for the page tests" >&2
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "[install-chromium] not root: run 'sudo apt-get install -y chromium' for the page tests" >&2
    exit 0
fi
echo "[install-chromium] installing Debian's chromium (about a minute)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# A font of its own: text on the page (and in docs/page.png) must render without recommends.
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version >&2
