#!/usr/bin/env bash
# A Mantle cluster on this machine: one etcd and three `mantle serve --cluster` nodes on
# loopback, each with its own RocksDB under DIR (default out/cluster).
#
#   scripts/cluster.sh start [DIR] [-- SERVE_FLAGS...]   start etcd and nodes n1..n3, spread the
#                                                         slots, print status
#   scripts/cluster.sh stop [DIR]    stop them (data stays in DIR)
#   scripts/cluster.sh demo [DIR] [-- SERVE_FLAGS...]    start, write and read through every node, stop
#
# Ports: etcd 23790 (peer 23800), nodes 7001-7003; set CLUSTER_PORT_BASE to move the nodes,
# CLUSTER_ETCD_PORT to move etcd. CLUSTER_NODES (default 3) nodes are started; CLUSTER_MODE=proxy
# starts them with --cluster-mode proxy (default client).
#
# Flags after `--` go to every node's `mantle serve` (e.g. -- --max-keys 5000 --policy p.lua
# --tick manual). In them `{i}` is the node's number and `{port}` its port; a bare `--http`
# gets a port per node (CLUSTER_HTTP_BASE + i, default 9100 + i), so node i's dashboard is at
# http://127.0.0.1:$((9100 + i))/. The cluster's own flags (--data-dir, --listen, --cluster,
# --cluster-name, --node-id, --cluster-mode) are set here and may not be given.
# The nodes share this machine's cores: unless the flags give --threads, each node gets
# cores / nodes worker threads (at least one), so they do not keep waking one another's
# workers (docs/cluster.md); `-- --threads 0` gives each node one per core instead.
# Needs etcd, redis-cli (scripts/setup.sh installs both) and a built mantle (MANTLE or PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

action="${1:-}"
shift || true
dir=out/cluster
if [ $# -gt 0 ] && [ "$1" != "--" ]; then dir="$1"; shift; fi
node_flags=()
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || { echo "cluster.sh: unexpected '$1' (node flags go after --)" >&2; exit 2; }
  shift
  node_flags=("$@")
fi
http_base="${CLUSTER_HTTP_BASE:-9100}"
threads_given=0
for flag in ${node_flags[@]+"${node_flags[@]}"}; do
  case "$flag" in
    --threads|--threads=*) threads_given=1 ;;
    --data-dir|--data-dir=*|--listen|--listen=*|--cluster|--cluster=*|--cluster-name|--cluster-name=*|--node-id|--node-id=*|--cluster-mode|--cluster-mode=*)
      echo "cluster.sh: $flag is set by cluster.sh for each node (use CLUSTER_MODE, CLUSTER_PORT_BASE)" >&2
      exit 2 ;;
  esac
done

# Node $1's copy of the node flags: {i} and {port} filled in, a bare --http given a port.
node_args() {
  local i=$1 port=$2 n=${#node_flags[@]} k=0 arg next
  args=()
  while [ $k -lt "$n" ]; do
    arg=${node_flags[$k]}
    arg=${arg//\{i\}/$i}
    arg=${arg//\{port\}/$port}
    args+=("$arg")
    if [ "$arg" = --http ]; then
      next=${node_flags[$((k + 1))]:-}
      if [ -z "$next" ] || [ "${next#--}" != "$next" ]; then
        args+=("127.0.0.1:$((http_base + i))")
      fi
    fi
    k=$((k + 1))
  done
}
base="${CLUSTER_PORT_BASE:-7000}"
etcd_port="${CLUSTER_ETCD_PORT:-23790}"
nodes="${CLUSTER_NODES:-3}"
mode="${CLUSTER_MODE:-client}"
case "$nodes" in
  '' | *[!0-9]* | 0) echo "cluster.sh: CLUSTER_NODES must be a positive number, got '$nodes'" >&2; exit 2 ;;
esac
shared_threads=()
if [ "$threads_given" = 0 ]; then
  per_node=$(( $(nproc) / nodes ))
  shared_threads=(--threads "$(( per_node > 0 ? per_node : 1 ))")
fi
name=local
mantle="${MANTLE:-$(command -v mantle || true)}"
if [ -z "$mantle" ]; then
  . scripts/env.sh
  mantle="$MANTLE"
fi
[ -x "$mantle" ] || { echo "cluster.sh: no mantle binary; build it (cargo build --release) or set MANTLE" >&2; exit 1; }

wait_port() {
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "cluster.sh: nothing listens on port $1 after 10 s (see $dir/*.log)" >&2
  return 1
}

start() {
  mkdir -p "$dir"
  etcd --name e1 --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
    --initial-cluster "e1=http://127.0.0.1:$((etcd_port + 10))" \
    --logger zap --log-level error >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  wait_port "$etcd_port"
  for i in $(seq 1 "$nodes"); do
    node_args "$i" "$((base + i))"
    "$mantle" serve --data-dir "$dir/n$i" --listen "127.0.0.1:$((base + i))" \
      --cluster "etcd://127.0.0.1:$etcd_port" --cluster-name "$name" --node-id "n$i" \
      --cluster-mode "$mode" ${shared_threads[@]+"${shared_threads[@]}"} ${args[@]+"${args[@]}"} >"$dir/n$i.log" 2>&1 &
    echo $! >"$dir/n$i.pid"
    wait_port "$((base + i))"
    # A node listens before it has joined: wait until it is a member, so n1 is the first
    # node of the cluster (and takes the slots) whatever the timing.
    for _ in $(seq 1 200); do
      "$mantle" cluster --cluster "etcd://127.0.0.1:$etcd_port" --cluster-name "$name" status 2>/dev/null | grep -q "^  n$i at " && break
      sleep 0.05
    done
  done
  # Spread the slots once all have joined (the first node took them all).
  for _ in $(seq 1 100); do
    members=$("$mantle" cluster --cluster "etcd://127.0.0.1:$etcd_port" --cluster-name "$name" status | grep -c ' at 127.0.0.1:' || true)
    [ "$members" -ge "$nodes" ] && break
    sleep 0.1
  done
  [ "${CLUSTER_REBALANCE:-1}" = 1 ] &&
    "$mantle" cluster --cluster "etcd://127.0.0.1:$etcd_port" --cluster-name "$name" rebalance >/dev/null
  "$mantle" cluster --cluster "etcd://127.0.0.1:$etcd_port" --cluster-name "$name" status
}

# Stops the nodes first (each leaves the cluster through etcd as it goes), then etcd.
stop() {
  for group in "$dir"/n*.pid "$dir"/etcd.pid; do
    for f in $group; do
      [ -f "$f" ] || continue
      pid=$(cat "$f")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$f"
    done
  done
}

case "$action" in
  start) start ;;
  stop) stop ;;
  demo)
    trap stop EXIT
    start
    for k in apple banana cherry; do redis-cli -c -p "$((base + 1))" set "$k" "fruit:$k" >/dev/null; done
    for port in $((base + 1)) $((base + 2)) $((base + 3)); do
      echo "via $port: $(redis-cli -c -p "$port" get banana)"
    done
    ;;
  *)
    echo "usage: scripts/cluster.sh start|stop|demo [DIR] [-- SERVE_FLAGS...]" >&2
    exit 2
    ;;
esac
