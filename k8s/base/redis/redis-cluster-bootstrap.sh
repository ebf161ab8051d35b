#!/bin/sh
# Form the Redis Cluster once every server answers (the alnair-redis-bootstrap Job).
#
# Idempotent, so the Job may run again at any time (a re-apply, a restore):
# * no slot assigned anywhere: `redis-cli --cluster create` over all servers;
# * all 16384 slots assigned: the cluster exists; a server that does not know every other
#   one (it came back with a new address, or with an empty volume) is introduced again
#   with CLUSTER MEET, and slots left uncovered are repaired with `--cluster fix`;
# * anything else (slots assigned in part: a create interrupted half-way) is repaired with
#   `--cluster fix` too.
# Exits 0 once the cluster answers cluster_state:ok on every server, 1 with the reason
# otherwise (the Job retries).
#
# Environment: REDIS_NODES (space-separated host:port of every server), REDISCLI_AUTH (the
# password), WAIT_SECONDS (default 300), REPLICAS_PER_MASTER (default 0).
set -eu
: "${REDIS_NODES:?set REDIS_NODES to the host:port of every server}"
WAIT_SECONDS=${WAIT_SECONDS:-300}
deadline=$(( $(date +%s) + WAIT_SECONDS ))

say() { echo "redis-cluster-bootstrap: $*"; }
fail() { echo "redis-cluster-bootstrap: $*" >&2; exit 1; }
cli() { addr=$1; shift; redis-cli --no-auth-warning -h "${addr%:*}" -p "${addr##*:}" "$@"; }
info() { cli "$1" cluster info | tr -d '\r' | sed -n "s/^$2://p"; }
resolve() { getent hosts "$1" 2>/dev/null | awk '{print $1; exit}'; }

addrs=""
for node in $REDIS_NODES; do
    host=${node%:*}
    port=${node##*:}
    while :; do
        ip=$(resolve "$host")
        if [ -n "$ip" ] && [ "$(cli "$ip:$port" ping 2>/dev/null)" = PONG ]; then
            break
        fi
        [ "$(date +%s)" -lt "$deadline" ] || fail "$node did not answer PING within ${WAIT_SECONDS} s"
        sleep 2
    done
    addrs="$addrs $ip:$port"
done
count=$(echo $addrs | wc -w)
first=$(echo $addrs | cut -d' ' -f1)
assigned=0
for addr in $addrs; do
    mine=$(info "$addr" cluster_slots_assigned)
    [ "${mine:-0}" -gt "$assigned" ] && assigned=$mine
done

if [ "$assigned" -eq 0 ]; then
    say "creating the cluster over $count servers:$addrs"
    # shellcheck disable=SC2086
    redis-cli --no-auth-warning --cluster create $addrs \
        --cluster-replicas "${REPLICAS_PER_MASTER:-0}" --cluster-yes
else
    say "cluster exists ($assigned slots assigned); checking that every server is in it"
    for addr in $addrs; do
        known=$(info "$addr" cluster_known_nodes)
        if [ "${known:-0}" -lt "$count" ]; then
            say "introducing $addr (it knows $known of $count servers)"
            cli "$first" cluster meet "${addr%:*}" "${addr##*:}" >/dev/null
        fi
    done
    if [ "$assigned" -lt 16384 ] || [ "$(info "$first" cluster_state)" != ok ]; then
        sleep 2  # let the introductions gossip before fixing what is still uncovered
        redis-cli --no-auth-warning --cluster fix "$first" --cluster-yes || true
    fi
fi

for addr in $addrs; do
    while [ "$(info "$addr" cluster_state)" != ok ]; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "$addr: cluster_state is not ok within ${WAIT_SECONDS} s"
        sleep 1
    done
done
say "cluster ok: $count servers, 16384 slots"
