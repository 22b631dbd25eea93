#!/usr/bin/env bash
# One open-model load run split over agents (`"agents": N`), against nginx: what the split
# buys when one agent's host is the limit. On a 2-core machine the agents' "hosts" are
# CPU quotas: every agent process runs in a cgroup of its own (cgroup v2 cpu.max or v1
# cpu.cfs_quota_us, PERCENT of a core, a 10 ms period), all on core 0, and nginx
# (bench/nginx-lean.conf.template) has core 1 to itself.
#
# For each RATE: one agent runs the whole spec, then N agents run its N shares side by
# side (`iohr-agent exec --share I/N`, each in its own quota), and their results are
# merged with iohr-bench-merge, as the controller merges a split run's shares. Rounds
# interleave the two. Prints asked against achieved rate, late and dropped sends and the
# corrected p99 of each.
#
# With --controller-bin, a third row per rate: the same spec POSTed with `"agents": N` to
# a controller (SQLite, on core 0 without a quota) whose N agents (`iohr-agent run`) each
# run in their own quota, as a user runs it: placement, the shares' common start, the
# relayed frames and the controller's merge included.
#
#   bench/split-load.sh --agent-bin PATH --merge-bin PATH [--controller-bin PATH]
#                       [--shares N] [--cpu PERCENT] [--duration D] [--connections C]
#                       [--rounds R] RATE...
#
# Needs root (the cgroups), nginx, taskset and jq (Debian: apt-get install nginx-light
# util-linux jq). Loopback only; every run is bounded by
# its duration.
set -euo pipefail

SHARES=3
CPU=20
DURATION=10s
CONNECTIONS=60
ROUNDS=2
AGENT_BIN=
MERGE_BIN=
CONTROLLER_BIN=
RATES=()

die() {
    echo "split-load.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
        --agent-bin) AGENT_BIN=${2:?}; shift 2 ;;
        --merge-bin) MERGE_BIN=${2:?}; shift 2 ;;
        --controller-bin) CONTROLLER_BIN=${2:?}; shift 2 ;;
        --shares) SHARES=${2:?}; shift 2 ;;
        --cpu) CPU=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --connections) CONNECTIONS=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        -*) die "unknown option $1" ;;
        *) RATES+=("$1"); shift ;;
    esac
done
[ -x "$AGENT_BIN" ] || die "--agent-bin: an iohr-agent binary is needed"
[ -x "$MERGE_BIN" ] || die "--merge-bin: an iohr-bench-merge binary is needed"
[ -z "$CONTROLLER_BIN" ] || [ -x "$CONTROLLER_BIN" ] || die "--controller-bin: not an executable"
[ -z "$CONTROLLER_BIN" ] || command -v curl >/dev/null || die "--controller-bin needs curl"
[ "${#RATES[@]}" -gt 0 ] || die "give at least one rate"
for rate in "${RATES[@]}"; do
    [[ $rate =~ ^[1-9][0-9]*$ ]] || die "a rate is a positive integer, not '$rate'"
done
[[ $CPU =~ ^[1-9][0-9]?$|^100$ ]] || die "--cpu is a percentage of one core"
NGINX_BIN=$(command -v nginx) || die "nginx is needed (apt-get install nginx-light)"

WORK=$(mktemp -d /tmp/iohr-split-load.XXXXXX)
NGINX_PID=
GROUPS_MADE=()
FLEET_PIDS=()
cleanup() {
    [ -z "$NGINX_PID" ] || kill "$NGINX_PID" 2>/dev/null || true
    for pid in "${FLEET_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    for group in "${GROUPS_MADE[@]}"; do
        # The agents of --controller-bin run in their groups until they are stopped.
        xargs -r kill <"$group/cgroup.procs" 2>/dev/null || true
        # A killed process leaves its cgroup a moment after it has gone.
        for _ in $(seq 1 50); do
            [ -n "$(cat "$group/cgroup.procs" 2>/dev/null)" ] || break
            sleep 0.1
        done
        rmdir "$group" 2>/dev/null || echo "split-load.sh: could not remove $group" >&2
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# One cgroup per agent: the whole run's, then one per share.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
        echo +cpu >/sys/fs/cgroup/cgroup.subtree_control ||
        die "cannot enable the cpu controller (needs root)"
    CGROUP_ROOT=/sys/fs/cgroup
else
    CGROUP_ROOT=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
    [ -n "$CGROUP_ROOT" ] || die "no cgroup filesystem with the cpu controller"
fi
for i in $(seq 0 "$SHARES"); do
    group=$CGROUP_ROOT/iohr-split-load.$$.$i
    mkdir "$group" || die "cannot create $group (needs root)"
    GROUPS_MADE+=("$group")
    if [ -f "$group/cpu.max" ]; then
        echo "$((CPU * 100)) 10000" >"$group/cpu.max"
    else
        echo 10000 >"$group/cpu.cfs_period_us"
        echo "$((CPU * 100))" >"$group/cpu.cfs_quota_us"
    fi
done

PORT=
for candidate in $(seq 18200 18300); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
        PORT=$candidate
        break
    fi
done
[ -n "$PORT" ] || die "no free port in 18200-18300"
chmod 755 "$WORK"
mkdir -p "$WORK/www"
printf '<!DOCTYPE html>\n<html><body><h1>Welcome to nginx!</h1></body></html>\n' >"$WORK/www/index.html"
chmod -R a+rX "$WORK/www"
TEMPLATE=$(dirname "$0")/nginx-lean.conf.template
sed -e "s#@DIR@#$WORK#g" -e "s#@PORT@#$PORT#g" -e "s#@LISTEN@##g" -e "s#@TLS@##g" \
    "$TEMPLATE" >"$WORK/nginx.conf"
setsid taskset -c 1 "$NGINX_BIN" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" \
    >"$WORK/nginx.out" 2>&1 &
NGINX_PID=$!
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    kill -0 "$NGINX_PID" 2>/dev/null || die "nginx exited at start: $(cat "$WORK/error.log" 2>/dev/null)"
    sleep 0.1
done
URL="http://127.0.0.1:$PORT"

# One agent process in cgroup $1, on core 0: exec with the rest of the arguments.
in_group() {
    local group=$1
    shift
    taskset -c 0 sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" "$@"
}

# The controller and its agents, when asked for: agent i in the quota of share i.
if [ -n "$CONTROLLER_BIN" ]; then
    DATA=$WORK/controller
    ctl() { "$CONTROLLER_BIN" "$@" --data-dir "$DATA"; }
    ctl init >/dev/null
    ctl account set-plan --name default --max-running "$SHARES" >/dev/null
    TOKEN=$(ctl token create --account default --scope reliability:run \
        --scope reliability:read | tail -n 1)
    free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
    API_PORT=$(free_port)
    LINK_PORT=$(free_port)
    taskset -c 0 "$CONTROLLER_BIN" serve --data-dir "$DATA" --api-addr "127.0.0.1:$API_PORT" \
        --agent-addr "127.0.0.1:$LINK_PORT" >"$WORK/controller.out" 2>"$WORK/controller.log" &
    FLEET_PIDS+=($!)
    API="http://127.0.0.1:$API_PORT/v1/reliability"
    for i in $(seq 0 $((SHARES - 1))); do
        ctl agent-cert --account default --agent "split-$i" --out "$WORK/agent-$i" >/dev/null
        in_group "${GROUPS_MADE[$((i + 1))]}" "$AGENT_BIN" run \
            --controller "https://127.0.0.1:$LINK_PORT" --identity "$WORK/agent-$i" \
            --environment staging --state-dir "$WORK/state-$i" 2>"$WORK/agent-$i.log" &
        FLEET_PIDS+=($!)
    done
    online=0
    for _ in $(seq 1 300); do
        online=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/agents" 2>/dev/null |
            jq '[.agents[] | select(.online)] | length' 2>/dev/null || echo 0)
        [ "$online" = "$SHARES" ] && break
        sleep 0.1
    done
    [ "$online" = "$SHARES" ] || die "only $online of $SHARES agents came online: $(tail -n 5 "$WORK/controller.log")"
fi

# POSTs the spec with "agents": N and waits (bounded) for its ending; the result in $1.
via_controller() {
    local out=$1 id status
    id=$(jq -c --arg t "$URL" --argjson n "$SHARES" \
        '{kind: "load", environment: "staging", target: $t, agents: $n, spec: .}' \
        "$WORK/spec.json" | curl -sf -H "Authorization: Bearer $TOKEN" \
        -H 'Content-Type: application/json' --data-binary @- "$API/runs" | jq -r '.id')
    [ -n "$id" ] && [ "$id" != null ] || die "the controller refused the run"
    for _ in $(seq 1 1200); do
        status=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/runs/$id" | tee "$WORK/run.json" |
            jq -r '.status')
        case $status in passed | failed | error | cancelled) break ;; esac
        sleep 0.1
    done
    jq '.result' "$WORK/run.json" >"$out"
    [ "$(jq -r '.result.achieved_rate // empty' "$WORK/run.json")" != "" ] ||
        die "run $id ended $status with no result: $(jq -c '.reason' "$WORK/run.json")"
}

row() {
    local label=$1 rate=$2 file=$3
    jq -r --arg name "$label" --arg rate "$rate" '[$name, $rate,
        (.achieved_rate | . * 10 | round / 10), .late, .dropped,
        (if .latency.percentiles.p99.value == null then "n/a"
         else ((.latency.percentiles.p99.value | round) / 1000) end)] |
        "| " + join(" | ") + " |"' "$file"
}

echo "nginx on core 1; each agent under ${CPU}% of core 0; open model, $CONNECTIONS connections, $DURATION"
echo
echo "| run | asked rate/s | achieved rate/s | late | dropped | p99 (ms) |"
echo "|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
    for rate in "${RATES[@]}"; do
        printf '{"operations":[{"path":"/"}],"model":"open","rate":%s,"connections":%s,"duration":"%s","warmup":"1s"}\n' \
            "$rate" "$CONNECTIONS" "$DURATION" >"$WORK/spec.json"
        in_group "${GROUPS_MADE[0]}" "$AGENT_BIN" exec --kind load --target "$URL" \
            "$WORK/spec.json" --json >"$WORK/whole.json" 2>"$WORK/whole.err" || true
        jq '.result' "$WORK/whole.json" >"$WORK/whole.result" ||
            die "the whole run printed no result: $(cat "$WORK/whole.err")"
        row "round $round, 1 agent" "$rate" "$WORK/whole.result"
        pids=()
        for i in $(seq 0 $((SHARES - 1))); do
            in_group "${GROUPS_MADE[$((i + 1))]}" "$AGENT_BIN" exec --kind load --target "$URL" \
                --share "$i/$SHARES" "$WORK/spec.json" --json >"$WORK/share-$i.json" \
                2>"$WORK/share-$i.err" &
            pids+=($!)
        done
        for pid in "${pids[@]}"; do
            wait "$pid" || true
        done
        shares=()
        for i in $(seq 0 $((SHARES - 1))); do
            shares+=("$WORK/share-$i.json")
        done
        "$MERGE_BIN" "${shares[@]}" >"$WORK/merged.result"
        row "round $round, $SHARES agents merged" "$rate" "$WORK/merged.result"
        if [ -n "$CONTROLLER_BIN" ]; then
            via_controller "$WORK/controller.result"
            row "round $round, $SHARES agents via the controller" "$rate" "$WORK/controller.result"
        fi
    done
done
