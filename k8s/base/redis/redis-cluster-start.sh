#!/bin/sh
# Start one server of the Redis Cluster (the alnair-redis StatefulSet's container command).
#
# Each server announces its stable DNS name (<pod>.<service>), so clients that follow a
# MOVED redirect reach it wherever it runs. Pod IPs change when pods are rescheduled, and
# the cluster's nodes.conf (kept on the pod's volume) still names the old ones: before
# starting, every peer's address in it is refreshed from the DNS name the peer announced,
# so a cluster whose pods all restarted at once finds itself again.
#
# Environment: POD_NAME, REDIS_SERVICE (the headless Service), REDIS_PASSWORD, DATA_DIR
# (default /data), REDIS_PORT (default 6379), REDIS_MAXMEMORY (default 400mb).
set -euf
: "${POD_NAME:?set POD_NAME from metadata.name}"
: "${REDIS_SERVICE:?set REDIS_SERVICE to the headless Service of the StatefulSet}"
: "${REDIS_PASSWORD:?set REDIS_PASSWORD from the alnair-credentials Secret}"
DATA_DIR=${DATA_DIR:-/data}
PORT=${REDIS_PORT:-6379}
HOSTNAME_ANNOUNCED=${ANNOUNCE_HOSTNAME:-$POD_NAME.$REDIS_SERVICE}
CONF=$DATA_DIR/nodes.conf

resolve() {  # the first address of a DNS name (an IP stays itself); empty when unknown
    getent hosts "$1" 2>/dev/null | awk '{print $1; exit}'
}

refresh_peers() {  # in a function: its `set --` leaves the script's arguments alone
    fresh=$CONF.fresh
    : > "$fresh"
    # Lines: <id> <ip:port@cport[,hostname]> <flags> ...; the last one is "vars ...".
    while IFS= read -r line; do
        set -- $line
        if [ "$#" -ge 2 ] && [ "$1" != vars ]; then
            addr=$2
            case "$addr" in
                *,*)
                    aux=${addr#*,}  # hostname[,key=value...] (Redis 7)
                    name=${aux%%,*}
                    ip=$(resolve "$name")
                    if [ -n "$name" ] && [ -n "$ip" ]; then
                        ports=${addr%%,*}
                        ports=${ports#*:}
                        line=$(printf '%s\n' "$line" | sed "s|^$1 [^ ]*|$1 $ip:$ports,$aux|")
                    fi
                    ;;
            esac
        fi
        printf '%s\n' "$line" >> "$fresh"
    done < "$CONF"
    mv "$fresh" "$CONF"
}

if [ -s "$CONF" ]; then
    refresh_peers
fi

exec redis-server \
    --port "$PORT" \
    --dir "$DATA_DIR" \
    --requirepass "$REDIS_PASSWORD" \
    --masterauth "$REDIS_PASSWORD" \
    --cluster-enabled yes \
    --cluster-config-file nodes.conf \
    --cluster-node-timeout 5000 \
    --cluster-announce-hostname "$HOSTNAME_ANNOUNCED" \
    --cluster-preferred-endpoint-type hostname \
    --appendonly yes \
    --maxmemory "${REDIS_MAXMEMORY:-400mb}" \
    --maxmemory-policy noeviction \
    "$@"
