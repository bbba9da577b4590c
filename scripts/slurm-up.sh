#!/usr/bin/env bash
# `make slurm-up`: a one-node SLURM cluster on this machine (munge, slurmctld, slurmd from Debian's
# packages), for `make test-slurm`. Safe to run again: a cluster already up is left as it is.
# Where it cannot start (not root, no packages and no apt-get, a slurm.conf that is not ours) it says
# why and exits 0: the SLURM tests then skip with the same reason.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CONF=/etc/slurm/slurm.conf
MARK="written by lnbench's scripts/slurm-up.sh"
skip() { echo "slurm-up: skipped: $*" >&2; exit 0; }
say() { echo "slurm-up: $*"; }

[ "$(id -u)" = 0 ] || skip "it needs root (to install packages and start the daemons); the SLURM tests will skip"
[ "$(uname -s)" = Linux ] || skip "it needs Linux"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || skip "SLURM is not installed and there is no apt-get to install it"
    say "installing slurmctld slurmd slurm-client munge (apt-get, a minute or two)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurmctld slurmd slurm-client munge >/tmp/lnbench-slurm-apt.log 2>&1 \
        || { apt-get update -q >>/tmp/lnbench-slurm-apt.log 2>&1 && apt-get install -y -q slurmctld slurmd slurm-client munge >>/tmp/lnbench-slurm-apt.log 2>&1; } \
        || skip "apt-get could not install SLURM (see /tmp/lnbench-slurm-apt.log)"
fi

if [ -f "$CONF" ] && ! grep -q "$MARK" "$CONF"; then
    skip "$CONF exists and was not written by lnbench: this machine has a SLURM of its own, left untouched"
fi

# Already up: the controller answers and the node takes jobs.
if scontrol ping 2>/dev/null | grep -q "is UP" && sinfo -h -o %T 2>/dev/null | grep -qE "idle|mix|alloc|comp"; then
    say "already up: $(sinfo -h -o '%P %D node(s) %T' | tr '\n' ' ')"
    exit 0
fi

# munge: every SLURM message is signed with this machine's key.
if [ ! -s /etc/munge/munge.key ]; then
    (command -v mungekey >/dev/null && mungekey --create --keyfile=/etc/munge/munge.key) \
        || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || skip "munged did not start (see /var/log/munge/munged.log)"

node="$(hostname -s)"
addr=127.0.0.1
node_line="$(slurmd -C | head -1)"  # NodeName=<host> CPUs=... RealMemory=...: this machine as slurmd sees it
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
sed -e "s/@NODE@/$node/g" -e "s/@ADDR@/$addr/g" -e "s/@NODE_LINE@/$node_line/" "$HERE/slurm/slurm.conf.in" >"$CONF.tmp"
mv "$CONF.tmp" "$CONF"

# Restarted on the config just written (a daemon left from an earlier start may run an older one).
for d in slurmd slurmctld; do
    if [ -f "/run/$d.pid" ] && kill -0 "$(cat "/run/$d.pid")" 2>/dev/null; then
        kill "$(cat "/run/$d.pid")"
        for _ in $(seq 50); do kill -0 "$(cat "/run/$d.pid")" 2>/dev/null || break; sleep 0.1; done
    fi
done
slurmctld
slurmd
for _ in $(seq 100); do
    sinfo -h -o %T 2>/dev/null | grep -qE "idle|mix|alloc|comp" && break
    sleep 0.2
done
# A node left down or drained by an earlier run (a killed slurmd) takes jobs again.
if sinfo -h -o %T 2>/dev/null | grep -qE "down|drain"; then
    scontrol update NodeName="$node" State=RESUME 2>/dev/null || true
    sleep 1
fi
sinfo -h -o %T 2>/dev/null | grep -qE "idle|mix|alloc|comp" \
    || skip "the node did not come up: $(sinfo -h -o '%T %E' 2>&1 | head -1) (see /var/log/slurm/)"
say "up: partition $(sinfo -h -o '%P %D node(s), %c CPUs, %T' | head -1); logs in /var/log/slurm/"
