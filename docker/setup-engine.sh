#!/usr/bin/env bash
# Make a Docker engine answer on this machine: install docker.io when dockerd is missing, start
# dockerd in the background when nothing answers, and wait until `docker info` succeeds.
#
# Idempotent: on a machine whose engine already answers it returns at once. Needs root (CI and
# the project's machines run as root); on a developer box with Docker Desktop or a system dockerd
# it does nothing.
#
# Environment:
#   MME_DOCKERD_LOG   where dockerd writes its log (default /tmp/mme-dockerd.log)
#   MME_DOCKERD_WAIT  seconds to wait for the engine (default 60)
set -euo pipefail

log_file="${MME_DOCKERD_LOG:-/tmp/mme-dockerd.log}"
wait_s="${MME_DOCKERD_WAIT:-60}"

say() { echo "[setup-engine] $*" >&2; }

engine_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
    say "engine already answers"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        say "dockerd is missing: install docker.io (apt-get install docker.io) or Docker Engine"
        exit 1
    fi
    say "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # docker.io brings dockerd, containerd and runc; the client may already be elsewhere on PATH.
    apt-get install -y -qq --no-install-recommends docker.io iptables >/dev/null
fi

if ! engine_answers; then
    if [ "$(id -u)" != 0 ]; then
        say "no Docker engine answers and this user cannot start dockerd: start it (systemctl start docker)"
        exit 1
    fi
    if [ -S /var/run/docker.sock ] && ! pgrep -x dockerd >/dev/null 2>&1; then
        rm -f /var/run/docker.sock  # left by a dockerd that died with the previous machine run
    fi
    if ! pgrep -x dockerd >/dev/null 2>&1; then
        say "starting dockerd (log: $log_file)"
        # setsid + nohup: dockerd outlives this script and the shell that ran it.
        setsid nohup dockerd >"$log_file" 2>&1 </dev/null &
    fi
    for _ in $(seq 1 $((wait_s * 4))); do
        if engine_answers; then break; fi
        sleep 0.25
    done
fi

if ! engine_answers; then
    say "dockerd did not answer within ${wait_s}s; last lines of $log_file:"
    tail -n 30 "$log_file" >&2 || true
    exit 1
fi
say "engine ready: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}' 2>/dev/null || echo '?')"
