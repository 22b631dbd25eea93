#!/usr/bin/env bash
# A stalled target is a regression, not a saturated generator (issue 39), measured as a
# user runs it: a controller (SQLite) and one agent (`iohr-agent run`), two open-model
# load runs of one spec against nginx, the second with nginx's worker stopped (SIGSTOP)
# for one second STOP_AT seconds into its measure, then `GET /compare` of the two.
#
# nginx (bench/nginx-lean.conf.template, one worker) and the controller share core 0; the
# agent has core 1 to itself, so the generator has CPU to spare at a rate it keeps.
# Rounds repeat the pair. For each run it prints the corrected and uncorrected p99, late
# sends by cause (late_held: waited for a connection the target held; late_behind: over
# 100 ms late with a connection free, the generator's), connections opened of
# max_connections, generator_saturated and target_held_connections (their seconds or
# "none"); for each pair, compare's verdict and its worse differences (or its refusal).
#
#   bench/stall-compare.sh --agent-bin PATH --controller-bin PATH [--rate R]
#                          [--connections C] [--duration D] [--stop-at S] [--rounds N]
#                          [--max-connections M] [--keep DIR]
#
# --keep DIR keeps each run's JSON and each compare's answer there.
#
# Needs nginx, taskset, curl, jq and python3 (Debian: apt-get install nginx-light
# util-linux curl jq python3). Loopback only; every run is bounded by its duration and
# every wait by a count. The target is never left stopped: the exit path sends SIGCONT.
set -euo pipefail

RATE=20000
CONNECTIONS=256
DURATION=10s
STOP_AT=5
ROUNDS=1
MAX_CONNECTIONS=
KEEP=
AGENT_BIN=
CONTROLLER_BIN=

die() {
    echo "stall-compare.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case $1 in
        --agent-bin) AGENT_BIN=${2:?}; shift 2 ;;
        --controller-bin) CONTROLLER_BIN=${2:?}; shift 2 ;;
        --rate) RATE=${2:?}; shift 2 ;;
        --connections) CONNECTIONS=${2:?}; shift 2 ;;
        --max-connections) MAX_CONNECTIONS=${2:?}; shift 2 ;;
        --duration) DURATION=${2:?}; shift 2 ;;
        --stop-at) STOP_AT=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --keep) KEEP=${2:?}; shift 2 ;;
        *) die "unknown argument $1" ;;
    esac
done
[ -x "$AGENT_BIN" ] || die "--agent-bin: an iohr-agent binary is needed"
[ -x "$CONTROLLER_BIN" ] || die "--controller-bin: an iohr-controller binary is needed"
[[ $RATE =~ ^[1-9][0-9]*$ ]] || die "--rate is a positive integer"
[[ $STOP_AT =~ ^[1-9][0-9]*$ ]] || die "--stop-at is whole seconds"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds is a positive integer"
for tool in taskset curl jq python3 pgrep; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done
NGINX_BIN=$(command -v nginx) || die "nginx is needed (apt-get install nginx-light)"

WORK=$(mktemp -d /tmp/iohr-stall-compare.XXXXXX)
PIDS=()
NGINX_PID=
NGINX_WORKER=
cleanup() {
    if [ -n "$KEEP" ]; then
        mkdir -p "$KEEP" && cp "$WORK"/*.json "$KEEP"/ 2>/dev/null || true
    fi
    # Never leave the target stopped.
    [ -z "$NGINX_WORKER" ] || kill -CONT "$NGINX_WORKER" 2>/dev/null || true
    for pid in "${PIDS[@]}" $NGINX_PID; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# --- nginx on core 0 --------------------------------------------------------------------
PORT=$(free_port)
chmod 755 "$WORK"
mkdir -p "$WORK/www"
printf '<!DOCTYPE html>\n<html><body><h1>Welcome to nginx!</h1></body></html>\n' >"$WORK/www/index.html"
chmod -R a+rX "$WORK/www"
sed -e "s#@DIR@#$WORK#g" -e "s#@PORT@#$PORT#g" -e "s#@LISTEN@##g" -e "s#@TLS@##g" \
    "$(dirname "$0")/nginx-lean.conf.template" >"$WORK/nginx.conf"
taskset -c 0 "$NGINX_BIN" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" \
    >"$WORK/nginx.out" 2>&1 &
NGINX_PID=$!
for _ in $(seq 1 100); do
    NGINX_WORKER=$(pgrep -P "$NGINX_PID" -f 'nginx: worker' | head -n 1 || true)
    [ -n "$NGINX_WORKER" ] && (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    kill -0 "$NGINX_PID" 2>/dev/null || die "nginx exited at start: $(cat "$WORK/error.log" 2>/dev/null)"
    sleep 0.1
done
[ -n "$NGINX_WORKER" ] || die "no nginx worker within 10 s"
URL="http://127.0.0.1:$PORT"

# --- the controller on core 0, the agent on core 1 --------------------------------------
DATA=$WORK/controller
ctl() { "$CONTROLLER_BIN" "$@" --data-dir "$DATA"; }
ctl init >/dev/null
TOKEN=$(ctl token create --account default --scope reliability:run \
    --scope reliability:read | tail -n 1)
API_PORT=$(free_port)
LINK_PORT=$(free_port)
taskset -c 0 "$CONTROLLER_BIN" serve --data-dir "$DATA" --api-addr "127.0.0.1:$API_PORT" \
    --agent-addr "127.0.0.1:$LINK_PORT" >"$WORK/controller.out" 2>"$WORK/controller.log" &
PIDS+=($!)
API="http://127.0.0.1:$API_PORT/v1/reliability"
ctl agent-cert --account default --agent stall-agent --out "$WORK/agent" >/dev/null
taskset -c 1 "$AGENT_BIN" run --controller "https://127.0.0.1:$LINK_PORT" \
    --identity "$WORK/agent" --environment staging --state-dir "$WORK/state" \
    2>"$WORK/agent.log" &
PIDS+=($!)
online=0
for _ in $(seq 1 300); do
    online=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/agents" 2>/dev/null |
        jq '[.agents[] | select(.online)] | length' 2>/dev/null || echo 0)
    [ "$online" = 1 ] && break
    sleep 0.1
done
[ "$online" = 1 ] || die "the agent did not come online: $(tail -n 5 "$WORK/controller.log")"

SPEC=$(jq -nc --argjson rate "$RATE" --argjson c "$CONNECTIONS" --arg d "$DURATION" \
    --arg max "$MAX_CONNECTIONS" \
    '{operations: [{path: "/"}], model: "open", rate: $rate, connections: $c, duration: $d}
     + (if $max == "" then {} else {max_connections: ($max | tonumber)} end)')

# POSTs the spec, stops nginx's worker for one second STOP_AT s into the run when $2 is
# "stop", and waits (bounded) for the run's end; prints its id. The run is in $WORK/$1.json.
one_run() {
    local name=$1 stop=$2 id status stopped resumed
    id=$(jq -nc --arg t "$URL" --argjson spec "$SPEC" \
        '{kind: "load", environment: "staging", target: $t, spec: $spec}' |
        curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
            --data-binary @- "$API/runs" | jq -r '.id')
    [ -n "$id" ] && [ "$id" != null ] || die "the controller refused the run"
    # The spec has no warm-up: its measure starts as the run does.
    for _ in $(seq 1 300); do
        status=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/runs/$id" | jq -r '.status')
        [ "$status" = queued ] || break
        sleep 0.02
    done
    if [ "$stop" = stop ]; then
        sleep "$STOP_AT"
        kill -STOP "$NGINX_WORKER"
        stopped=$(date +%s%N)
        sleep 1
        kill -CONT "$NGINX_WORKER"
        resumed=$(date +%s%N)
        echo "  ($name: nginx's worker stopped for $(((resumed - stopped) / 1000000)) ms)" >&2
    fi
    for _ in $(seq 1 1200); do
        status=$(curl -sf -H "Authorization: Bearer $TOKEN" "$API/runs/$id" |
            tee "$WORK/$name.json" | jq -r '.status')
        case $status in passed | failed | error | cancelled) break ;; esac
        sleep 0.1
    done
    case $status in passed | failed) ;; *) die "run $id ended $status: $(jq -c '.reason' "$WORK/$name.json")" ;; esac
    echo "$id"
}

row() {
    local label=$1 file=$2
    jq -r --arg name "$label" '.result as $r | [$name,
        ($r.latency.percentiles.p99.value / 1000 | . * 10 | round / 10 | tostring),
        ($r.uncorrected_latency.percentiles.p99.value / 1000 | . * 10 | round / 10 | tostring),
        "\($r.sent) / \($r.intended)", ($r.late | tostring), ($r.late_held | tostring),
        ($r.late_behind | tostring), "\($r.connections_opened) of \($r.max_connections)",
        (if $r.generator_saturated == null then "none"
         else "\($r.generator_saturated.count) s: " + ([$r.generator_saturated.reasons[].text] | join("; ")) end),
        (if $r.target_held_connections == null then "none"
         else "seconds \($r.target_held_connections.seconds | map(tostring) | join(", "))" end)
    ] | "| " + join(" | ") + " |"' "$file"
}

echo "nginx (lean, 1 worker) and the controller on core 0, the agent on core 1;"
echo "open model $RATE/s, $CONNECTIONS connections, $DURATION; the stop: ${STOP_AT} s into the measure, 1 s"
echo
echo "| run | p99 (ms) | uncorrected p99 (ms) | sent / intended | late | late_held | late_behind | connections opened | generator_saturated | target_held_connections |"
echo "|---|---|---|---|---|---|---|---|---|---|"
VERDICTS=()
for round in $(seq 1 "$ROUNDS"); do
    clean=$(one_run "clean-$round" none)
    row "round $round, A: no stop" "$WORK/clean-$round.json"
    stalled=$(one_run "stalled-$round" stop)
    row "round $round, B: 1 s stop" "$WORK/stalled-$round.json"
    code=$(curl -s -o "$WORK/compare-$round.json" -w '%{http_code}' \
        -H "Authorization: Bearer $TOKEN" "$API/compare?before=$clean&after=$stalled")
    if [ "$code" = 200 ]; then
        VERDICTS+=("round $round: compare A B: $(jq -r '.verdict + "; worse: " +
            ([.differences[] | select(.worse) | .line] | join("; ")) + "; p99: " +
            ([.differences[].line, (.unchanged // [])[] | if type == "string" then . else (.line // tostring) end]
             | map(select(startswith("p99 total"))) | join("; ")) + "; note: " +
            ([.notes[] | select(startswith("late sends by cause"))] | join("; "))' \
            "$WORK/compare-$round.json")")
    else
        VERDICTS+=("round $round: compare A B: $code $(jq -c '.' "$WORK/compare-$round.json")")
    fi
done
echo
printf '%s\n' "${VERDICTS[@]}"
