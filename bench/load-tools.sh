#!/usr/bin/env bash
# Side-by-side load benchmark: the iohr load engine (`iohr-agent exec --kind load`) against
# wrk, oha and hey, all hitting one nginx worker that serves a 612-byte static page on
# 127.0.0.1. nginx is pinned to core 0 and every load tool to core 1, so each tool gets
# one core, like the target; each run is wrapped in GNU time for its peak RSS.
#
# --nginx lean (the default) serves the page with the least work per request
# (bench/nginx-lean.conf.template: the file's descriptor cached, one writev per answer), so
# that the target is not the limit of every tool; --nginx debian keeps the settings of
# Debian's packaged nginx.conf (sendfile, tcp_nopush; bench/nginx.conf.template).
#
# Rounds are interleaved (round 1: iohr, wrk, oha, hey; round 2: the same, ...) so a
# machine that slows down over time slows every tool alike. Prints a markdown table of
# requests/s, peak RSS, how busy nginx's core was per run (near 100%: the target, not
# the tool, was the limit) and the tool's own CPU per request (GNU time's user + system
# over its requests), the median per tool and the ratios iohr/wrk and iohr/oha, of
# requests/s and of requests per CPU-second.
#
#   bench/load-tools.sh [--rounds N] [--connections C] [--duration D] [--agent-bin PATH]
#                       [--port PORT] [--skip-iohr] [--open RATE | --soak]
#                       [--nginx lean|debian] [--tool-cpu PERCENT]
#                       [--protocol h1|h1-tls|h2c|h2] [--streams M] [--stop-target-at S]
#                       [--baseline-bin PATH] [--floor PATH]
#
# --protocol picks what nginx speaks and so which peers run beside the engine:
#   h1      HTTP/1.1 over TCP (the default): wrk, oha and hey
#   h1-tls  HTTP/1.1 over TLS: wrk
#   h2c     HTTP/2 over TCP, prior knowledge: h2load (nghttp2-client)
#   h2      HTTP/2 over TLS (ALPN h2): h2load
# Over TLS, nginx serves a certificate for 127.0.0.1 from a CA made for the run (openssl,
# ECDSA P-256) and offers one cipher suite, TLS_AES_128_GCM_SHA256 on TLS 1.3, so every
# tool does the same cryptography. --streams M (HTTP/2 only, default 1) is the concurrent
# streams per connection: h2load's -m and the engine's `streams`, both over C connections.
#
# --baseline-bin PATH (closed model) also runs another build of the agent, as the tool
# "base", right after the engine in every round, and prints iohr/base: a change to the
# engine measured against the build before it in the same interleaved rounds.
#
# --floor PATH (closed model, --protocol h1) also runs iohr-bench-h1-floor from PATH
# (cargo build --release -p iohr-bench --bin iohr-bench-h1-floor) in every round, once on
# epoll (floor_epoll) and once on io_uring (floor_uring): a client that does nothing but
# the socket I/O, the most any client could get from each interface; and both again with
# the engine's own work per request (the clock, the head parsed, the latency recorded:
# floor_epoll_rec, floor_uring_rec). Prints each against wrk and the engine against them.
#
# --tool-cpu PERCENT runs every tool under a CPU quota of PERCENT of its core (a cgroup of
# its own: v2 cpu.max or v1 cpu.cfs_quota_us, a 10 ms period; needs root), so that the
# tools, not nginx, are the limit: with a whole core each, the fast tools all keep nginx's
# one core busy and requests/s measure the target. Under the quota every tool gets the
# same CPU time, and requests/s measure what each does with it.
#
# --open RATE runs only the iohr engine's open model at RATE requests/s (one run per
# round) and prints its achieved rate, late and dropped counts and p99, for the record.
# --soak does the same with the closed model (CONNECTIONS as fast as nginx answers: the
# highest rate the target sustains). --stop-target-at S (with --open) stops nginx's worker
# with SIGSTOP S seconds into each run and resumes it with SIGCONT one second later: the
# requests due in that second wait up to a second, which an honest (corrected) p99 shows.
# Both sample the engine's RSS every 10 s and give the
# share of its CPU the once-a-second frames took.
#
# Needs nginx, taskset, GNU time (/usr/bin/time), jq, pgrep and ps, and the peers of the
# protocol: wrk and hey (h1), wrk and openssl (h1-tls), h2load (h2c; and openssl: h2) (Debian:
# apt-get install nginx wrk hey nghttp2-client openssl util-linux time jq procps); oha is taken from ${OHA:-/tmp/oha/bin/oha} and
# skipped when absent. Loopback only.
set -euo pipefail

ROUNDS=3
CONNECTIONS=64
DURATION=10s
AGENT_BIN=target/release/iohr-agent
BASELINE_BIN=
FLOOR_BIN=
PORT=
SKIP_IOHR=0
OPEN_RATE=
SOAK=0
NGINX_CONFIG=lean
TOOL_CPU=
PROTOCOL=h1
STREAMS=1
STOP_AT=
OHA_BIN=${OHA:-/tmp/oha/bin/oha}
NGINX_BIN=/usr/sbin/nginx
HERE=$(cd "$(dirname "$0")" && pwd)

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit "${1:-0}"
}

die() {
    echo "load-tools.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=${2:?--rounds needs a number}; shift 2 ;;
        --connections) CONNECTIONS=${2:?--connections needs a number}; shift 2 ;;
        --duration) DURATION=${2:?--duration needs e.g. 10s}; shift 2 ;;
        --agent-bin) AGENT_BIN=${2:?--agent-bin needs a path}; shift 2 ;;
        --baseline-bin) BASELINE_BIN=${2:?--baseline-bin needs a path}; shift 2 ;;
        --floor) FLOOR_BIN=${2:?--floor needs a path}; shift 2 ;;
        --port) PORT=${2:?--port needs a number}; shift 2 ;;
        --skip-iohr) SKIP_IOHR=1; shift ;;
        --open) OPEN_RATE=${2:?--open needs a rate}; shift 2 ;;
        --soak) SOAK=1; shift ;;
        --nginx) NGINX_CONFIG=${2:?--nginx needs lean or debian}; shift 2 ;;
        --tool-cpu) TOOL_CPU=${2:?--tool-cpu needs a percentage}; shift 2 ;;
        --protocol) PROTOCOL=${2:?--protocol needs h1, h1-tls, h2c or h2}; shift 2 ;;
        --streams) STREAMS=${2:?--streams needs a number}; shift 2 ;;
        --stop-target-at) STOP_AT=${2:?--stop-target-at needs seconds}; shift 2 ;;
        -h | --help) usage 0 ;;
        *) echo "load-tools.sh: unknown argument $1" >&2; usage 2 ;;
    esac
done

[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, not '$ROUNDS'"
[[ $CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "--connections must be a positive integer, not '$CONNECTIONS'"
# One spelling every tool takes: wrk -d, oha -z, hey -z and the engine's humantime.
[[ $DURATION =~ ^[1-9][0-9]*[sm]$ ]] || die "--duration must look like 10s or 2m, not '$DURATION'"
DURATION_S=${DURATION%?}
[ "${DURATION: -1}" = s ] || DURATION_S=$((DURATION_S * 60))
[ -z "$PORT" ] || [[ $PORT =~ ^[1-9][0-9]*$ ]] || die "--port must be a number, not '$PORT'"
[ -z "$OPEN_RATE" ] || [[ $OPEN_RATE =~ ^[1-9][0-9]*$ ]] || die "--open must be a positive integer rate, not '$OPEN_RATE'"
case "$NGINX_CONFIG" in
    lean) NGINX_TEMPLATE=$HERE/nginx-lean.conf.template ;;
    debian) NGINX_TEMPLATE=$HERE/nginx.conf.template ;;
    *) die "--nginx must be lean or debian, not '$NGINX_CONFIG'" ;;
esac
[ -z "$OPEN_RATE" ] || [ "$SOAK" = 0 ] || die "--open and --soak cannot go together"
[[ $STREAMS =~ ^[1-9][0-9]*$ ]] || die "--streams must be a positive integer, not '$STREAMS'"
if [ -n "$STOP_AT" ]; then
    [[ $STOP_AT =~ ^[1-9][0-9]*$ ]] || die "--stop-target-at must be whole seconds, not '$STOP_AT'"
    [ -n "$OPEN_RATE" ] || die "--stop-target-at goes with --open"
fi
# nginx's listen parameters, the scheme, the engine's `http` and whether TLS is set up.
case "$PROTOCOL" in
    h1) LISTEN_PARAMS= ; SCHEME=http; HTTP_VERSION=1.1; TLS=0 ;;
    h1-tls) LISTEN_PARAMS=ssl; SCHEME=https; HTTP_VERSION=1.1; TLS=1 ;;
    h2c) LISTEN_PARAMS=http2; SCHEME=http; HTTP_VERSION=2; TLS=0 ;;
    h2) LISTEN_PARAMS="ssl http2"; SCHEME=https; HTTP_VERSION=2; TLS=1 ;;
    *) die "--protocol must be h1, h1-tls, h2c or h2, not '$PROTOCOL'" ;;
esac
[ "$HTTP_VERSION" = 2 ] || [ "$STREAMS" = 1 ] || die "--streams is for HTTP/2 (--protocol h2c or h2)"
if [ -n "$TOOL_CPU" ]; then
    # The kernel takes no quota under 1 ms, and the period is 10 ms.
    [[ $TOOL_CPU =~ ^[1-9][0-9]$ ]] || die "--tool-cpu must be a percentage from 10 to 99, not '$TOOL_CPU'"
fi
if { [ -n "$OPEN_RATE" ] || [ "$SOAK" = 1 ]; } && [ "$SKIP_IOHR" = 1 ]; then
    die "--open and --soak run only the iohr engine; they cannot go with --skip-iohr"
fi

# --- tools ------------------------------------------------------------------------------
missing=()
[ -x "$NGINX_BIN" ] || missing+=("nginx ($NGINX_BIN; apt-get install nginx)")
PEERS=()
case "$PROTOCOL" in
    h1) PEERS=(wrk hey) ;;
    h1-tls) PEERS=(wrk) ;;
    h2c | h2) PEERS=(h2load) ;;
esac
# --open and --soak run the engine alone.
if [ -n "$OPEN_RATE" ] || [ "$SOAK" = 1 ]; then
    PEERS=()
fi
[ "$TLS" = 0 ] || PEERS+=(openssl)
for tool in "${PEERS[@]}" taskset setsid jq; do
    case "$tool" in
        h2load) package=nghttp2-client ;;
        taskset) package=util-linux ;;
        *) package=$tool ;;
    esac
    command -v "$tool" >/dev/null || missing+=("$tool (apt-get install $package)")
done
for tool in pgrep ps; do
    command -v "$tool" >/dev/null || missing+=("$tool (apt-get install procps)")
done
/usr/bin/time -V >/dev/null 2>&1 || missing+=("GNU time (/usr/bin/time; apt-get install time)")
[ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]}"
if [ -n "$BASELINE_BIN" ]; then
    [ -x "$BASELINE_BIN" ] || die "no agent at --baseline-bin $BASELINE_BIN"
    { [ -z "$OPEN_RATE" ] && [ "$SOAK" = 0 ] && [ "$SKIP_IOHR" = 0 ]; } ||
        die "--baseline-bin goes with the closed model's comparison, not --open, --soak or --skip-iohr"
fi
if [ -n "$FLOOR_BIN" ]; then
    [ -x "$FLOOR_BIN" ] || die "no iohr-bench-h1-floor at --floor $FLOOR_BIN"
    { [ -z "$OPEN_RATE" ] && [ "$SOAK" = 0 ] && [ "$PROTOCOL" = h1 ]; } ||
        die "--floor goes with the closed model over plain HTTP/1.1 (--protocol h1)"
fi
if [ "$SKIP_IOHR" = 0 ] && [ ! -x "$AGENT_BIN" ]; then
    die "no iohr agent at $AGENT_BIN (cargo build --release -p iohr-agent, or --agent-bin PATH, or --skip-iohr)"
fi
HAVE_OHA=1
if [ "$PROTOCOL" != h1 ]; then
    HAVE_OHA=0
elif [ -z "$OPEN_RATE" ] && [ "$SOAK" = 0 ] && [ ! -x "$OHA_BIN" ]; then
    echo "load-tools.sh: oha not found at $OHA_BIN (set OHA=PATH); skipping oha" >&2
    HAVE_OHA=0
fi
if [ "$(nproc)" -lt 2 ]; then
    echo "load-tools.sh: warning: fewer than 2 cores; nginx and the tools share one" >&2
fi

# --- cleanup ----------------------------------------------------------------------------
WORK=$(mktemp -d -t iohr-load-tools.XXXXXX)
NGINX_PID=
RUN_PID=
SAMPLER=
STOPPER=
TOOL_CGROUP=
ENABLED_CPU_CONTROLLER=0

# Each child runs in a session of its own (setsid), so one signal to its process group
# reaches everything it started (nginx's worker, GNU time's child).
stop_group() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    [ -z "$SAMPLER" ] || kill "$SAMPLER" 2>/dev/null || true
    [ -z "$STOPPER" ] || kill "$STOPPER" 2>/dev/null || true
    # Never leave the target stopped.
    [ -z "${NGINX_WORKER:-}" ] || kill -CONT "$NGINX_WORKER" 2>/dev/null || true
    stop_group "$RUN_PID"
    stop_group "$NGINX_PID"
    if [ -n "$TOOL_CGROUP" ]; then
        # A killed tool leaves its cgroup a moment after its parent has gone.
        for _ in $(seq 1 50); do
            # (cgroup files report no size: read them.)
            [ -n "$(cat "$TOOL_CGROUP/cgroup.procs" 2>/dev/null)" ] || break
            sleep 0.1
        done
        rmdir "$TOOL_CGROUP" 2>/dev/null ||
            echo "load-tools.sh: warning: could not remove the cgroup $TOOL_CGROUP" >&2
        if [ "$ENABLED_CPU_CONTROLLER" = 1 ]; then
            echo -cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
        fi
    fi
    rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the tools' CPU quota ---------------------------------------------------------------
# The cgroup every tool runs in with --tool-cpu: its processes file is TOOL_CGROUP_PROCS.
TOOL_CGROUP_PROCS=
if [ -n "$TOOL_CPU" ]; then
    quota_us=$((TOOL_CPU * 100))
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        grep -qw cpu /sys/fs/cgroup/cgroup.controllers ||
            die "--tool-cpu: cgroup v2 without the cpu controller"
        # Children of the root get the cpu controller only when it is delegated to them
        # (and it is put back as it was on exit).
        if ! grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
            echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
                die "--tool-cpu: cannot enable the cpu controller in /sys/fs/cgroup/cgroup.subtree_control (needs root, and a cgroup root without processes of its own, which a container's is not)"
            ENABLED_CPU_CONTROLLER=1
        fi
        mkdir "/sys/fs/cgroup/iohr-load-tools.$$" ||
            die "--tool-cpu: cannot create /sys/fs/cgroup/iohr-load-tools.$$ (needs root)"
        TOOL_CGROUP=/sys/fs/cgroup/iohr-load-tools.$$
        echo "$quota_us 10000" >"$TOOL_CGROUP/cpu.max"
    else
        cpu_mount=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
        [ -n "$cpu_mount" ] || die "--tool-cpu: no cgroup filesystem with the cpu controller"
        mkdir "$cpu_mount/iohr-load-tools.$$" ||
            die "--tool-cpu: cannot create $cpu_mount/iohr-load-tools.$$ (needs root)"
        TOOL_CGROUP=$cpu_mount/iohr-load-tools.$$
        echo 10000 >"$TOOL_CGROUP/cpu.cfs_period_us"
        echo "$quota_us" >"$TOOL_CGROUP/cpu.cfs_quota_us"
    fi
    TOOL_CGROUP_PROCS=$TOOL_CGROUP/cgroup.procs
fi

# --- nginx ------------------------------------------------------------------------------
port_in_use() {
    # A refused connect means nobody listens there.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

if [ -z "$PORT" ]; then
    for candidate in $(seq 18080 18180); do
        if ! port_in_use "$candidate"; then
            PORT=$candidate
            break
        fi
    done
    [ -n "$PORT" ] || die "no free port in 18080-18180; pass --port"
elif port_in_use "$PORT"; then
    die "port $PORT on 127.0.0.1 is in use"
fi
URL="$SCHEME://127.0.0.1:$PORT/"

# nginx's workers drop to an unprivileged user when started as root: they must be able to
# read the page.
chmod 755 "$WORK"
mkdir -p "$WORK/www"
cat >"$WORK/www/index.html" <<'HTML'
<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
<style>
    body {
        width: 35em;
        margin: 0 auto;
        font-family: Tahoma, Verdana, Arial, sans-serif;
    }
</style>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>For online documentation and support please refer to
<a href="http://nginx.org/">nginx.org</a>.<br/>
Commercial support is available at
<a href="http://nginx.com/">nginx.com</a>.</p>

<p><em>Thank you for using nginx.</em></p>
</body>
</html>
HTML
chmod -R a+rX "$WORK/www"

# --- TLS: a CA made for this run, and nginx's certificate for 127.0.0.1 signed by it -------
TLS_DIRECTIVES=
TARGET_CA=()
if [ "$TLS" = 1 ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=iohr load-tools CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>"$WORK/openssl.err" ||
        { cat "$WORK/openssl.err" >&2; die "openssl could not make the CA"; }
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$WORK/server.key" -out "$WORK/server.csr" 2>"$WORK/openssl.err" ||
        { cat "$WORK/openssl.err" >&2; die "openssl could not make the server's key"; }
    printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$WORK/server.ext"
    openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
        -CAcreateserial -days 2 -extfile "$WORK/server.ext" -out "$WORK/server.pem" 2>"$WORK/openssl.err" ||
        { cat "$WORK/openssl.err" >&2; die "openssl could not sign the server's certificate"; }
    chmod a+r "$WORK/server.key"
    # One line: the templates take the TLS directives where @TLS@ stands.
    TLS_DIRECTIVES="ssl_certificate $WORK/server.pem; ssl_certificate_key $WORK/server.key; ssl_protocols TLSv1.3; ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256; ssl_session_cache off;"
    TARGET_CA=(--target-ca "$WORK/ca.pem")
fi
sed -e "s#@DIR@#$WORK#g" -e "s#@PORT@#$PORT#g" -e "s#@LISTEN@#$LISTEN_PARAMS#g" \
    -e "s#@TLS@#$TLS_DIRECTIVES#g" "$NGINX_TEMPLATE" >"$WORK/nginx.conf"

# -e: the packaged binary opens its compiled-in error log before reading the config.
setsid taskset -c 0 "$NGINX_BIN" -p "$WORK" -e "$WORK/error.log" -c "$WORK/nginx.conf" \
    >"$WORK/nginx.out" 2>&1 &
NGINX_PID=$!

ready=0
for _ in $(seq 1 100); do
    if ! kill -0 "$NGINX_PID" 2>/dev/null; then
        cat "$WORK/nginx.out" "$WORK/error.log" >&2 2>/dev/null || true
        die "nginx exited at start"
    fi
    if port_in_use "$PORT"; then
        ready=1
        break
    fi
    sleep 0.1
done
[ "$ready" = 1 ] || die "nginx did not listen on 127.0.0.1:$PORT within 10 s"
# The master listens before it forks its worker: wait for the worker too.
NGINX_WORKER=
for _ in $(seq 1 50); do
    NGINX_WORKER=$(pgrep -P "$NGINX_PID" -f 'nginx: worker' | head -n 1 || true)
    [ -z "$NGINX_WORKER" ] || break
    sleep 0.1
done
[ -n "$NGINX_WORKER" ] || die "no nginx worker process under $NGINX_PID within 5 s"

# The CPU time nginx's worker has used, in ns (the first field of schedstat). Callers
# check the value: a `die` in $(...) would only leave the subshell.
nginx_cpu_ns() {
    awk '{ print $1 }' "/proc/$NGINX_WORKER/schedstat" 2>/dev/null || true
}
require_ns() {
    [[ $1 =~ ^[0-9]+$ ]] || die "could not read nginx's CPU time (worker $NGINX_WORKER gone?)"
}
page_bytes=$(wc -c <"$WORK/www/index.html")
echo "nginx $("$NGINX_BIN" -v 2>&1 | sed 's#.*/##') on $URL (core 0, ${page_bytes}-byte page, --nginx $NGINX_CONFIG, --protocol $PROTOCOL, streams=$STREAMS);" \
    "tools on core 1${TOOL_CPU:+ (${TOOL_CPU}% of it each)}; rounds=$ROUNDS connections=$CONNECTIONS duration=$DURATION" >&2

# --- one run ----------------------------------------------------------------------------
# run NAME CMD...: CMD pinned to core 1 under GNU time; stdout to $WORK/NAME.out, stderr to
# $WORK/NAME.err, time's report to $WORK/NAME.time. Interruptible: waits in the background.
run() {
    local name=$1
    shift
    local in_cgroup=()
    if [ -n "$TOOL_CGROUP_PROCS" ]; then
        # The shell joins the cgroup, then becomes the tool.
        in_cgroup=(sh -c 'echo $$ >"$0" && exec "$@"' "$TOOL_CGROUP_PROCS")
    fi
    setsid /usr/bin/time -v -o "$WORK/$name.time" taskset -c 1 "${in_cgroup[@]}" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null &
    RUN_PID=$!
    # The run's session: the RSS sampler reads the engine's own process by it.
    echo "$RUN_PID" >"$WORK/run.sid"
    local status=0
    wait "$RUN_PID" || status=$?
    RUN_PID=
    if [ "$status" -ne 0 ]; then
        echo "load-tools.sh: $name exited with $status; its output:" >&2
        tail -n 20 "$WORK/$name.out" "$WORK/$name.err" >&2 || true
        return 1
    fi
}

peak_rss_mib() {
    awk -F': *' '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$WORK/$1.time"
}

# Sets RPS to a number, or dies with the output it came from.
RPS=
set_rps() {
    local name=$1 value=$2
    if ! [[ $value =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
        echo "load-tools.sh: could not read requests/s from $name's output:" >&2
        head -c 2000 "$WORK/$name.out" >&2 || true
        exit 1
    fi
    RPS=$value
}

closed_spec() {
    printf '{"operations":[{"path":"/"}],"model":"closed","connections":%s,"duration":"%s","http":"%s","streams":%s}\n' \
        "$CONNECTIONS" "$DURATION" "$HTTP_VERSION" "$STREAMS"
}

open_spec() {
    printf '{"operations":[{"path":"/"}],"model":"open","rate":%s,"connections":%s,"duration":"%s","http":"%s","streams":%s}\n' \
        "$OPEN_RATE" "$CONNECTIONS" "$DURATION" "$HTTP_VERSION" "$STREAMS"
}

# Each rps_TOOL runs the tool once and sets RPS; a warning goes to stderr when the tool saw
# errors, so a fast run of failures does not pass for throughput. They run in this shell,
# never in $(...): a subshell would not know RUN_PID, and ctrl-c would leave the tool.
# engine_rps NAME BIN: one closed run of the agent at BIN.
engine_rps() {
    local name=$1 bin=$2
    closed_spec >"$WORK/spec.json"
    run "$name" "$bin" exec --kind load --target "$URL" "${TARGET_CA[@]}" "$WORK/spec.json" --json || exit 1
    local errors
    errors=$(jq -r '[.result.errors // {} | to_entries[] | .value] | add // 0' "$WORK/$name.out" 2>/dev/null || echo "?")
    [ "$errors" = 0 ] || echo "load-tools.sh: warning: $name reported errors: $(jq -c '.result.errors' "$WORK/$name.out")" >&2
    set_rps "$name" "$(jq -r '.result.achieved_rate // empty' "$WORK/$name.out" 2>/dev/null)"
}

rps_iohr() {
    engine_rps iohr "$AGENT_BIN"
}

rps_base() {
    engine_rps base "$BASELINE_BIN"
}

rps_wrk() {
    run wrk wrk -t1 "-c$CONNECTIONS" "-d$DURATION" "$URL" || exit 1
    if grep -qE 'Non-2xx|Socket errors' "$WORK/wrk.out"; then
        echo "load-tools.sh: warning: wrk: $(grep -E 'Non-2xx|Socket errors' "$WORK/wrk.out" | tr -s ' ')" >&2
    fi
    set_rps wrk "$(awk '/^Requests\/sec:/ { print $2 }' "$WORK/wrk.out")"
}

rps_oha() {
    run oha "$OHA_BIN" -c "$CONNECTIONS" -z "$DURATION" --no-tui --output-format json "$URL" || exit 1
    local errors
    # "aborted due to deadline": the requests in flight when -z ended, not failures.
    errors=$(jq -r '.errorDistribution // {} | del(.["aborted due to deadline"]) | length' "$WORK/oha.out" 2>/dev/null || echo "?")
    [ "$errors" = 0 ] || echo "load-tools.sh: warning: oha errors: $(jq -c '.errorDistribution' "$WORK/oha.out")" >&2
    set_rps oha "$(jq -r '.summary.requestsPerSec // empty' "$WORK/oha.out" 2>/dev/null)"
}

rps_h2load() {
    # One thread (one core, as wrk -t1); -m streams on each of -c connections; no TLS check.
    run h2load h2load -t1 "-c$CONNECTIONS" "-m$STREAMS" -D "$DURATION_S" "$URL" || exit 1
    local failed
    failed=$(awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($i ~ /^(failed|errored|timeout),?$/) n += $(i - 1) } END { print n + 0 }' "$WORK/h2load.out")
    [ "$failed" = 0 ] || echo "load-tools.sh: warning: h2load: $(grep '^requests:' "$WORK/h2load.out")" >&2
    local non2xx
    non2xx=$(awk '/^status codes:/ { print $5 + $7 + $9 + 0 }' "$WORK/h2load.out")
    [ "${non2xx:-0}" = 0 ] || echo "load-tools.sh: warning: h2load: $(grep '^status codes:' "$WORK/h2load.out")" >&2
    grep -q "Application protocol: $([ "$HTTP_VERSION" = 2 ] && echo h2 || echo http/1.1)" "$WORK/h2load.out" ||
        { [ "$PROTOCOL" = h2c ] && grep -q 'Application protocol: h2c' "$WORK/h2load.out"; } ||
        echo "load-tools.sh: warning: h2load did not say it spoke $PROTOCOL: $(grep 'Application protocol' "$WORK/h2load.out")" >&2
    set_rps h2load "$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$WORK/h2load.out")"
}

# floor_rps NAME IO [--record]: one run of iohr-bench-h1-floor on IO (epoll or uring).
floor_rps() {
    local name=$1 io=$2
    shift 2
    run "$name" "$FLOOR_BIN" --target "127.0.0.1:$PORT" --io "$io" \
        --connections "$CONNECTIONS" --seconds "$DURATION_S" "$@" || exit 1
    set_rps "$name" "$(jq -r '.rps // empty' "$WORK/$name.out" 2>/dev/null)"
}

rps_floor_epoll() {
    floor_rps floor_epoll epoll
}

rps_floor_uring() {
    floor_rps floor_uring uring
}

rps_floor_epoll_rec() {
    floor_rps floor_epoll_rec epoll --record
}

rps_floor_uring_rec() {
    floor_rps floor_uring_rec uring --record
}

rps_hey() {
    run hey hey -c "$CONNECTIONS" -z "$DURATION" "$URL" || exit 1
    if grep -q 'Error distribution' "$WORK/hey.out"; then
        echo "load-tools.sh: warning: hey saw errors:" >&2
        sed -n '/Error distribution/,$p' "$WORK/hey.out" | head -n 10 >&2
    fi
    local non200
    non200=$(awk '/Status code distribution/ { on = 1; next } on && /\[[0-9]+\]/ && $1 != "[200]" { n += $2 } END { print n + 0 }' "$WORK/hey.out")
    [ "$non200" = 0 ] || echo "load-tools.sh: warning: hey saw $non200 non-200 responses" >&2
    set_rps hey "$(awk '/Requests\/sec:/ { print $2 }' "$WORK/hey.out")"
}

median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) exit
        if (NR % 2) printf "%.2f", v[(NR + 1) / 2]
        else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2
    }'
}

# --- one long run of the engine: open model at a rate, or closed (soak) ----------------
if [ -n "$OPEN_RATE" ] || [ "$SOAK" = 1 ]; then
    if [ "$SOAK" = 1 ]; then
        closed_spec >"$WORK/spec.json"
        TARGET_RATE="closed"
        echo
        echo "iohr closed model, connections=$CONNECTIONS, duration=$DURATION"
    else
        open_spec >"$WORK/spec.json"
        TARGET_RATE=$OPEN_RATE
        echo
        echo "iohr open model at $OPEN_RATE/s, connections=$CONNECTIONS, duration=$DURATION"
    fi
    echo
    echo "| round | target rate/s | achieved rate/s | late | dropped | p99 (ms) | uncorrected p99 (ms) | peak RSS (MiB) | RSS every 10 s: first/last, min, max (MiB) | frame work / engine CPU |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    rss_samples=()
    for round in $(seq 1 "$ROUNDS"); do
        # The engine's RSS every 10 s while it runs: flat means constant memory. Only the
        # iohr-agent of this run's session, not others on the machine.
        rm -f "$WORK/run.sid"
        (
            while sleep 10; do
                [ -s "$WORK/run.sid" ] || continue
                ps -o rss=,comm= -s "$(cat "$WORK/run.sid")" |
                    awk '$2 == "iohr-agent" { s += $1 } END { if (s) printf "%.1f\n", s / 1024 }'
            done
        ) >"$WORK/rss-$round.txt" &
        SAMPLER=$!
        if [ -n "$STOP_AT" ]; then
            # From the engine's start: its warm-up is none, so S s into the measure.
            (
                sleep "$STOP_AT"
                kill -STOP "$NGINX_WORKER"
                date +%s%N >"$WORK/stopped-$round"
                sleep 1
                kill -CONT "$NGINX_WORKER"
                date +%s%N >"$WORK/resumed-$round"
            ) &
            STOPPER=$!
        fi
        run iohr-open "$AGENT_BIN" exec --kind load --target "$URL" "${TARGET_CA[@]}" "$WORK/spec.json" --json || exit 1
        kill "$SAMPLER" 2>/dev/null || true
        wait "$SAMPLER" 2>/dev/null || true
        SAMPLER=
        if [ -n "$STOPPER" ]; then
            wait "$STOPPER" 2>/dev/null || true
            STOPPER=
            [ -s "$WORK/resumed-$round" ] ||
                die "round $round: the target was not stopped and resumed within the run (is --stop-target-at under the duration?)"
            stop_ms=$(( ($(cat "$WORK/resumed-$round") - $(cat "$WORK/stopped-$round")) / 1000000 ))
            echo "round $round: nginx's worker stopped for $stop_ms ms, $STOP_AT s into the run" >&2
        fi
        row=$(jq -r '.result | [
            (.achieved_rate // "n/a"),
            (.late // "n/a"),
            (.dropped // "n/a"),
            (if .latency.percentiles.p99.value == null then "n/a"
             else ((.latency.percentiles.p99.value | round) / 1000) end),
            (if .uncorrected_latency.percentiles.p99.value == null then "n/a"
             else ((.uncorrected_latency.percentiles.p99.value | round) / 1000) end)
        ] | map(tostring) | join(" | ")' "$WORK/iohr-open.out") ||
            { echo "load-tools.sh: could not read the engine's JSON:" >&2; head -c 2000 "$WORK/iohr-open.out" >&2; exit 1; }
        samples=$(awk 'NR == 1 { first = $1; lo = $1; hi = $1 } { last = $1; n++; if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
            END { if (n) printf "%s/%s, min %s max %s (%d samples)", first, last, lo, hi, n; else printf "n/a" }' "$WORK/rss-$round.txt")
        # The reporter logs what its once-a-second work cost; GNU time gives the CPU used.
        frame_us=$(sed -n 's/.*load frames emitted.*frame_work_us=\([0-9]*\).*/\1/p' "$WORK/iohr-open.err" | tail -n 1)
        cpu_s=$(awk -F': *' '/User time|System time/ { s += $2 } END { print s }' "$WORK/iohr-open.time")
        share=$(awk -v us="${frame_us:-0}" -v cpu="$cpu_s" 'BEGIN { if (cpu > 0) printf "%.3f%% (%.0f ms of %.1f s)", us / 1e4 / cpu, us / 1e3, cpu; else print "n/a" }')
        echo "| $round | $TARGET_RATE | $row | $(peak_rss_mib iohr-open) | $samples | $share |"
        cp "$WORK/iohr-open.out" "$WORK/iohr-open-$round.json"
        rss_samples+=("round $round: $(tr '\n' ' ' <"$WORK/rss-$round.txt")")
    done
    echo
    echo "The engine's RSS every 10 s (MiB):"
    printf '%s\n' "${rss_samples[@]}"
    exit 0
fi

# --- closed model, interleaved ----------------------------------------------------------
TOOLS=()
[ "$SKIP_IOHR" = 1 ] || TOOLS+=(iohr)
[ -z "$BASELINE_BIN" ] || TOOLS+=(base)
case "$PROTOCOL" in
    h1) TOOLS+=(wrk) ;;
    h1-tls) TOOLS+=(wrk) ;;
    h2c | h2) TOOLS+=(h2load) ;;
esac
[ "$HAVE_OHA" = 0 ] || TOOLS+=(oha)
[ "$PROTOCOL" != h1 ] || TOOLS+=(hey)
[ -z "$FLOOR_BIN" ] || TOOLS+=(floor_epoll floor_uring floor_epoll_rec floor_uring_rec)

: >"$WORK/results.tsv"
echo
echo "| tool | round | requests/s | peak RSS (MiB) | nginx core busy | nginx CPU per request (µs) | tool CPU per request (µs) |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
    for tool in "${TOOLS[@]}"; do
        cpu_before=$(nginx_cpu_ns)
        require_ns "$cpu_before"
        wall_before=$(date +%s%N)
        "rps_$tool"
        cpu_after=$(nginx_cpu_ns)
        require_ns "$cpu_after"
        # Busy: over the tool's whole run, start and exit included, so a little under the
        # truth. Per request: nginx's CPU (spent only on requests) over the requests the
        # tool's rate and the duration give.
        read -r busy per_request < <(awk -v c="$((cpu_after - cpu_before))" \
            -v w="$(($(date +%s%N) - wall_before))" -v r="$RPS" -v d="$DURATION_S" \
            'BEGIN { printf "%.1f %.2f\n", 100 * c / w, (r > 0 ? c / 1000 / (r * d) : 0) }')
        rps=$RPS
        rss=$(peak_rss_mib "$tool")
        # The tool's own CPU (user + system, start-up included; GNU time's 10 ms steps) per
        # request: requests per CPU-second is "at equal CPU" without the quota, which a
        # tool faster than nginx per request does not use up (it waits for answers).
        tool_per_request=$(awk -F': *' -v r="$RPS" -v d="$DURATION_S" \
            '/User time|System time/ { s += $2 } END { printf "%.2f", (r > 0 ? s * 1e6 / (r * d) : 0) }' "$WORK/$tool.time")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$round" "$rps" "$rss" "$busy" "$per_request" "$tool_per_request" >>"$WORK/results.tsv"
        printf '| %s | %s | %.1f | %s | %s%% | %s | %s |\n' "$tool" "$round" "$rps" "$rss" "$busy" "$per_request" "$tool_per_request"
    done
done

echo
echo "| tool | median requests/s | median peak RSS (MiB) | median nginx core busy | median nginx CPU per request (µs) | median tool CPU per request (µs) |"
echo "|---|---|---|---|---|---|"
declare -A MEDIAN
declare -A CPU_MEDIAN
for tool in "${TOOLS[@]}"; do
    MEDIAN[$tool]=$(awk -F'\t' -v t="$tool" '$1 == t { print $3 }' "$WORK/results.tsv" | median)
    rss=$(awk -F'\t' -v t="$tool" '$1 == t { print $4 }' "$WORK/results.tsv" | median)
    busy=$(awk -F'\t' -v t="$tool" '$1 == t { print $5 }' "$WORK/results.tsv" | median)
    per_request=$(awk -F'\t' -v t="$tool" '$1 == t { print $6 }' "$WORK/results.tsv" | median)
    CPU_MEDIAN[$tool]=$(awk -F'\t' -v t="$tool" '$1 == t { print $7 }' "$WORK/results.tsv" | median)
    echo "| $tool | ${MEDIAN[$tool]} | $rss | $busy% | $per_request | ${CPU_MEDIAN[$tool]} |"
done

echo
ratio() {
    local a=$1 b=$2
    if [ -n "${MEDIAN[$a]:-}" ] && [ -n "${MEDIAN[$b]:-}" ]; then
        awk -v x="${MEDIAN[$a]}" -v y="${MEDIAN[$b]}" -v a="$a" -v b="$b" \
            -v cx="${CPU_MEDIAN[$a]}" -v cy="${CPU_MEDIAN[$b]}" \
            'BEGIN { if (y > 0) printf "%s/%s (median requests/s): %.3f", a, b, x / y
                     if (cx > 0) printf "; per CPU-second (median tool CPU per request): %.3f", cy / cx
                     print "" }'
    else
        echo "$a/$b: n/a (a tool was skipped)"
    fi
}
if [ -n "$BASELINE_BIN" ]; then
    ratio iohr base
    case "$PROTOCOL" in
        h1 | h1-tls) ratio base wrk ;;
        h2c | h2) ratio base h2load ;;
    esac
fi
case "$PROTOCOL" in
    h1) ratio iohr wrk; ratio iohr oha ;;
    h1-tls) ratio iohr wrk ;;
    h2c | h2) ratio iohr h2load ;;
esac
if [ -n "$FLOOR_BIN" ]; then
    ratio floor_epoll wrk
    ratio floor_uring wrk
    ratio floor_epoll_rec wrk
    ratio floor_uring_rec wrk
    ratio iohr floor_epoll
    ratio iohr floor_epoll_rec
fi
