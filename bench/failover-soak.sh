#!/usr/bin/env bash
# Failover soak: a serving controller and a `serve --standby` on one PostgreSQL store
# (or, with --replicas, two `serve --replica` serving at once), real agents that know
# both addresses, checks runs posted at a steady rate, and a serving controller SIGKILLed
# every --kill-every seconds and started again (as the standby; with --replicas, as a
# replica again, the POSTs going to the other meanwhile and to both in turn otherwise).
# At the end, every run posted is read back:
#
# - runs lost: posted (201) but not ended `passed` (goal 0);
# - frames lost or duplicated: a run whose frames over SSE are not exactly 1..n, in order,
#   ending with `finished` (goal 0);
# - the controllers' RSS every 10 s, and the POSTs refused while neither served.
#
#   bench/failover-soak.sh [--bin DIR] [--agents N] [--duration S] [--kill-every S]
#                          [--rate RUNS_PER_S] [--postgres-admin URL] [--replicas] [--keep]
#
# Needs the workspace's binaries in --bin (default target/release: iohr-controller,
# iohr-agent, iohr-sample-target), PostgreSQL (a fresh database is made beside the admin
# URL's and dropped at the end), curl, jq, psql and python3. Loopback only; every loop is
# bounded by --duration.
set -euo pipefail

BIN=target/release
AGENTS=10
DURATION=600
KILL_EVERY=120
RATE=2
PG_ADMIN=postgres://postgres@127.0.0.1:5432/test
KEEP=0
ROLE=--standby
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN=$2; shift 2 ;;
        --agents) AGENTS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --kill-every) KILL_EVERY=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --postgres-admin) PG_ADMIN=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --replicas) ROLE=--replica; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
for tool in curl jq psql python3; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/iohr-soak.XXXXXX)
DB="iohr_soak_$$"
STORE="${PG_ADMIN%/*}/$DB"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}" ${CTL_PID[a]:-} ${CTL_PID[b]:-}; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    psql -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    if [ "$KEEP" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
psql -q "$PG_ADMIN" -c "CREATE DATABASE $DB" >/dev/null

DATA="$WORK/data"
ctl() { "$BIN/iohr-controller" "$@" --data-dir "$DATA" --database-url "$STORE"; }
ctl init >/dev/null
ctl account set-plan --name default --max-running 1000 >/dev/null
TOKEN=$(ctl token create --account default --scope reliability:run --scope reliability:read | tail -n 1)
for i in $(seq 1 "$AGENTS"); do
    ctl agent-cert --account default --agent "soak-$i" --out "$WORK/agent-$i" >/dev/null
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A API LINK CTL_PID
for c in a b; do API[$c]=$(free_port); LINK[$c]=$(free_port); done

"$BIN/iohr-sample-target" --listen 127.0.0.1:0 --max-seconds $((DURATION + 600)) >"$WORK/target.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 50); do grep -q '^listening on' "$WORK/target.out" && break; sleep 0.1; done
TARGET=$(sed -n 's/^listening on //p' "$WORK/target.out" | head -n 1)

start_controller() { # NAME [--standby]
    local c=$1; shift
    "$BIN/iohr-controller" serve --data-dir "$DATA" --database-url "$STORE" \
        --api-addr "127.0.0.1:${API[$c]}" --agent-addr "127.0.0.1:${LINK[$c]}" \
        --heartbeat-ms 1000 "$@" >>"$WORK/controller-$c.out" 2>>"$WORK/controller-$c.log" &
    CTL_PID[$c]=$!
}
serving() { # which controller answers on its API port, or nothing
    for c in a b; do
        if curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:${API[$c]}/healthz"; then
            echo "$c"; return
        fi
    done
}
# Every live controller, in turn (replicas); the one serving (standby).
POSTS=0
pick() {
    local live=()
    for c in a b; do
        curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:${API[$c]}/healthz" && live+=("$c")
    done
    [ ${#live[@]} = 0 ] && return
    echo "${live[$((POSTS % ${#live[@]}))]}"
}
if [ "$ROLE" = --replica ]; then start_controller a --replica; else start_controller a; fi
for _ in $(seq 1 100); do [ -n "$(serving)" ] && break; sleep 0.1; done
start_controller b "$ROLE"

CONTROLLERS="https://127.0.0.1:${LINK[a]},https://127.0.0.1:${LINK[b]}"
for i in $(seq 1 "$AGENTS"); do
    "$BIN/iohr-agent" run --controller "$CONTROLLERS" --identity "$WORK/agent-$i" \
        --environment staging --max-concurrent-jobs 4 --state-dir "$WORK/state-$i" \
        --reconnect-min-ms 100 --reconnect-max-ms 1000 2>"$WORK/agent-$i.log" &
    PIDS+=($!)
done
sleep 3

RUN_BODY=$(jq -nc --arg t "$TARGET" '{kind:"checks", environment:"staging", target:$t,
    spec:{checks:[{path:"/slow?ms=400"},{path:"/slow?ms=400"},{path:"/slow?ms=400"},{path:"/health"}]}}')
: >"$WORK/runs.txt"
: >"$WORK/rss.csv"
REFUSED=0
START=$(date +%s)
NEXT_KILL=$((START + KILL_EVERY))
NEXT_RSS=$START
KILLS=0
INTERVAL=$(python3 -c "print(1/$RATE)")
while [ $(($(date +%s) - START)) -lt "$DURATION" ]; do
    now=$(date +%s)
    if [ "$now" -ge "$NEXT_RSS" ]; then
        printf '%s,%s,%s,%s\n' $((now - START)) "$(serving)" \
            "$(ps -o rss= -p "${CTL_PID[a]}" 2>/dev/null | tr -d ' ')" \
            "$(ps -o rss= -p "${CTL_PID[b]}" 2>/dev/null | tr -d ' ')" >>"$WORK/rss.csv"
        NEXT_RSS=$((NEXT_RSS + 10))
    fi
    if [ "$now" -ge "$NEXT_KILL" ]; then
        # Replicas: a and b are killed in turn; a standby pair: the serving one.
        if [ "$ROLE" = --replica ]; then c=$([ $((KILLS % 2)) = 0 ] && echo a || echo b); else c=$(serving); fi
        if [ -n "$c" ]; then
            kill -9 "${CTL_PID[$c]}"
            wait "${CTL_PID[$c]}" 2>/dev/null || true
            # The standby takes over (at most 30 s), then the killed one comes back as
            # the new standby: the two swap roles at every kill.
            for _ in $(seq 1 300); do
                [ -n "$(serving)" ] && break
                sleep 0.1
            done
            start_controller "$c" "$ROLE"
            KILLS=$((KILLS + 1))
        fi
        NEXT_KILL=$((NEXT_KILL + KILL_EVERY))
    fi
    c=$(pick)
    POSTS=$((POSTS + 1))
    id=""
    if [ -n "$c" ]; then
        id=$(curl -sf --max-time 5 -X POST -H "Authorization: Bearer $TOKEN" \
            -H 'content-type: application/json' -d "$RUN_BODY" \
            "http://127.0.0.1:${API[$c]}/v1/reliability/runs" | jq -r '.id // empty' || true)
    fi
    if [ -n "$id" ]; then echo "$id" >>"$WORK/runs.txt"; else REFUSED=$((REFUSED + 1)); fi
    sleep "$INTERVAL"
done

# Every run ends (bounded), then each is read back.
api() { echo "http://127.0.0.1:${API[$(serving)]}"; }
DEADLINE=$(($(date +%s) + 120))
while [ "$(date +%s)" -lt "$DEADLINE" ]; do
    open=$(curl -sf -H "Authorization: Bearer $TOKEN" "$(api)/v1/reliability/runs?status=running&limit=1" | jq '.runs | length' || echo 1)
    queued=$(curl -sf -H "Authorization: Bearer $TOKEN" "$(api)/v1/reliability/runs?status=queued&limit=1" | jq '.runs | length' || echo 1)
    [ "$open" = 0 ] && [ "$queued" = 0 ] && break
    sleep 1
done
POSTED=$(wc -l <"$WORK/runs.txt")
LOST=0
BAD_FRAMES=0
declare -A STATUSES
while read -r id; do
    status=$(curl -sf -H "Authorization: Bearer $TOKEN" "$(api)/v1/reliability/runs/$id" | jq -r .status)
    STATUSES[$status]=$(( ${STATUSES[$status]:-0} + 1 ))
    [ "$status" = passed ] || LOST=$((LOST + 1))
    curl -sN --max-time 10 -H "Authorization: Bearer $TOKEN" \
        "$(api)/v1/reliability/runs/$id/events" >"$WORK/events.txt" || true
    ids=$(sed -n 's/^id: *//p' "$WORK/events.txt" | tr '\n' ' ')
    n=$(echo "$ids" | wc -w)
    want=$(seq -s ' ' 1 "$n")
    last=$(sed -n 's/^event: *//p' "$WORK/events.txt" | tail -n 1)
    if [ "$n" = 0 ] || [ "${ids% }" != "$want" ] || [ "$last" != finished ]; then
        BAD_FRAMES=$((BAD_FRAMES + 1))
        echo "run $id: frames [$ids] last event $last" >&2
    fi
done <"$WORK/runs.txt"

echo "| agents | duration | kills | runs posted | refused POSTs | runs not passed | runs with frames lost or repeated | statuses |"
echo "|---|---|---|---|---|---|---|---|"
echo "| $AGENTS | ${DURATION} s | $KILLS | $POSTED | $REFUSED | $LOST | $BAD_FRAMES | $(for s in "${!STATUSES[@]}"; do printf '%s %s ' "$s" "${STATUSES[$s]}"; done)|"
echo
echo "controllers' RSS (KiB) every 10 s: seconds,serving,a,b"
cat "$WORK/rss.csv"
