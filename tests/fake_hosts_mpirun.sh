#!/usr/bin/env bash
# fake_hosts_mpirun.sh — the mpirun of tests/test_elastic.sh (LLM4D_MPIRUN): a cluster whose named hosts are all
# this machine, so that `llm4d launch --nnodes` can lose a host and get it back here.
#   - A host is down while a file of its name exists in $FAKE_HOSTS_DIR/down/: a probe of it (`--host H`) fails as
#     ssh fails for a host that is gone (exit 255, ssh's line), and so does a job whose hostfile lists it.
#   - Otherwise the command runs through the real mpirun here, with the hostfile and the mapping dropped (every
#     host is this machine; rank r is on the hostfile's host r / slots, as `--map-by slot` would place it).
#   - Each job run (one with a hostfile) appends its hosts to $FAKE_HOSTS_DIR/runs, one line per run.
set -u
args=() host="" hostfile=""
while (($#)); do
    case $1 in
    --host) host=$2; shift 2 ;;
    --hostfile) hostfile=$2; shift 2 ;;
    --map-by) shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
unreachable() {
    echo "ssh: connect to host $1 port 22: No route to host" >&2
    exit 255
}
[ -n "$host" ] && [ -e "$FAKE_HOSTS_DIR/down/$host" ] && unreachable "$host"
if [ -n "$hostfile" ]; then
    hosts=$(awk '!/^#/ && NF { print $1 }' "$hostfile" | tr '\n' ' ')
    echo "${hosts% }" >>"$FAKE_HOSTS_DIR/runs"
    for h in $hosts; do [ -e "$FAKE_HOSTS_DIR/down/$h" ] && unreachable "$h"; done
fi
exec mpirun "${args[@]}"
