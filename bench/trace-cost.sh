#!/usr/bin/env bash
# What trace context costs the load engine (issue 35): requests per CPU-second of a closed
# HTTP/1.1 run against nginx (bench/nginx-lean.conf.template, pinned to core 0), for a
# build before trace context and for this build at trace_sample 0, 0.01 and 1, the engine
# pinned to core 1. Rounds are interleaved (before, 0, 0.01, 1; again ...) so a machine
# that slows down slows each alike. CPU is GNU time's user + system of the whole
# `iohr-agent exec` process; requests are its JSON's units_spent. Prints one line per run
# and the medians.
#
#   bench/trace-cost.sh --before PATH --after PATH [--rounds N] [--duration D]
#                       [--connections C] [--port PORT]
set -euo pipefail

ROUNDS=3
DURATION=10s
CONNECTIONS=64
PORT=18191
BEFORE=
AFTER=
while [ $# -gt 0 ]; do
    case "$1" in
        --before) BEFORE=$2; shift 2 ;;
        --after) AFTER=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --connections) CONNECTIONS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -x "$BEFORE" ] && [ -x "$AFTER" ] || { echo "--before and --after name agent binaries" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d)
mkdir -p "$DIR/www"
head -c 612 /dev/zero | tr '\0' 'x' >"$DIR/www/index.html"
sed -e "s|@DIR@|$DIR|g" -e "s|@PORT@|$PORT|g" -e "s|@LISTEN@||" -e "s|@TLS@||" \
    "$HERE/nginx-lean.conf.template" >"$DIR/nginx.conf"
taskset -c 0 nginx -c "$DIR/nginx.conf" &
NGINX=$!
trap 'kill $NGINX 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break
    sleep 0.1
done

spec() { # $1: "" or a trace_sample
    local extra=""
    [ -n "$1" ] && extra=",\"trace_sample\":$1"
    echo "{\"operations\":[{\"path\":\"/\"}],\"model\":\"closed\",\"connections\":$CONNECTIONS,\"duration\":\"$DURATION\"$extra}"
}
spec "" >"$DIR/before.json"
for s in 0 0.01 1; do spec "$s" >"$DIR/after-$s.json"; done

run() { # $1: label, $2: binary, $3: spec file
    local out
    out=$( { /usr/bin/time -f '%U %S' -o "$DIR/time" taskset -c 1 "$2" exec --kind load \
        --target "http://127.0.0.1:$PORT/" "$3" --json; } 2>/dev/null || true)
    local requests cpu
    requests=$(echo "$out" | jq -r '.units_spent')
    cpu=$(awk '{print $1 + $2}' "$DIR/time")
    echo "$1 $requests $cpu" | awk '{printf "%-12s %10d requests %7.2f CPU-s %10.0f requests/CPU-s\n", $1, $2, $3, $2 / $3}' \
        | tee -a "$DIR/results"
}

for round in $(seq "$ROUNDS"); do
    echo "round $round" >&2
    run before "$BEFORE" "$DIR/before.json"
    for s in 0 0.01 1; do run "sample=$s" "$AFTER" "$DIR/after-$s.json"; done
done

echo "medians (requests/CPU-s):"
for label in before sample=0 sample=0.01 sample=1; do
    grep "^$label " "$DIR/results" | awk '{print $(NF-1)}' | sort -n \
        | awk -v l="$label" '{a[NR]=$1} END {printf "%-12s %10.0f\n", l, a[int((NR+1)/2)]}'
done
