# Shared by the build scripts in this folder (sourced, not run): the Python whose packages are
# used, the label that records an image's inputs, and the offline wheel download for images
# whose interpreter is CPython 3.11 on Debian bookworm (glibc 2.36).
#
# The sourcing script sets `here` (this folder) first; `say` prefixes its messages with the
# script's name.

repo="$(dirname "$here")"
build_dir="${MME_BUILD_DIR:-/var/tmp/mme-docker-build}"
# MME_REBUILD=1 rebuilds an image whose inputs did not change. FORCE, its former name, is still
# read (a bare FORCE is too common a name to own), with a warning.
if [ -n "${FORCE:-}" ] && [ -z "${MME_REBUILD:-}" ]; then
    echo "warning: FORCE is deprecated: set MME_REBUILD=$FORCE instead" >&2
    MME_REBUILD="$FORCE"
fi
force="${MME_REBUILD:-0}"
label_key="com.sagemaker-mme-emulator.inputs"

if [ -n "${MME_PYTHON:-}" ]; then
    py="$MME_PYTHON"
elif [ -x "$repo/.venv/bin/python" ]; then
    py="$repo/.venv/bin/python"
else
    py="python3"
fi

say() { echo "[$(basename "$0" .sh)] $*" >&2; }

image_label() {  # image, label -> value ('' when the image or the label is missing)
    docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

# exit_if_built IMAGE LABEL HASH FORCE STARTED [DETAIL]: ends the script (status 0) when IMAGE's
# LABEL already holds its inputs' HASH and FORCE is not 1: there is nothing to build.
exit_if_built() {
    if [ "$4" != 1 ] && [ "$(image_label "$1" "$2")" = "$3" ]; then
        say "$1 is up to date${6:+ ($6)}; nothing to do in $(( $(date +%s) - $5 ))s"
        exit 0
    fi
}

image_size() {  # image -> "123 MB"
    docker image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1e6}'
}

# download_wheels DEST REQUIREMENTS_FILE: binary wheels for CPython 3.11 on bookworm, and pip.
download_wheels() {
    local platforms=() minor
    # pip matches explicit --platform tags exactly: every manylinux up to glibc 2.36.
    for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
    "$py" -m pip download --quiet --disable-pip-version-check --dest "$1" \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        "${platforms[@]}" --platform manylinux2014_x86_64 --platform any \
        -r "$2" pip 2>&1 | { grep -v "^WARNING: Location '" || true; } >&2
}

# link_into DEST FILE...: hard links where possible (docker build reads the context once).
link_into() {
    local dest="$1"
    shift
    mkdir -p "$dest"
    cp -l "$@" "$dest/" 2>/dev/null || cp "$@" "$dest/"
}
