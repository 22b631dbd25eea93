#!/usr/bin/env bash
# A working local installation on embedded defaults, in one command:
#
#   deploy/quickstart.sh          build, (re)start everything, run the example checks
#   deploy/quickstart.sh status   what is running
#   deploy/quickstart.sh down     stop everything it started
#
# Everything lives in .iohr/ at the repository root (ignored by git): the controller's
# data dir with its SQLite store and CA (.iohr/controller), the agent's certificate
# (.iohr/agent-local-1), your token (.iohr/token: a person's, the account's admin), the
# exports (.iohr/env), pid files (.iohr/run) and logs (.iohr/logs). Running it again
# reuses them and restarts the processes; `rm -rf .iohr` starts from scratch. Everything
# listens on 127.0.0.1 only.
#
# Ports (environment): IOHR_API_PORT (default 8480), IOHR_AGENT_PORT (8443),
# IOHR_TARGET_PORT for the sample target (default: the port it had the last time, kept in
# .iohr/target-port, so the URLs of runs, schedules and compares stay valid across
# restarts; a free port the first time).
# For the test suite: IOHR_QUICKSTART_STATE (another state dir than .iohr) and
# IOHR_QUICKSTART_NO_BUILD=1 (the binaries are already built).
#
# On any failure it stops what it started and says which log to read.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

STATE="${IOHR_QUICKSTART_STATE:-.iohr}"
DATA="$STATE/controller"
AGENT_NAME=local-1
AGENT_DIR="$STATE/agent-$AGENT_NAME"
LOGS="$STATE/logs"
PIDS="$STATE/run"
TOKEN_FILE="$STATE/token"
ENV_FILE="$STATE/env"
API_PORT="${IOHR_API_PORT:-8480}"
AGENT_PORT="${IOHR_AGENT_PORT:-8443}"
TARGET_PORT_FILE="$STATE/target-port"
TARGET_PORT="${IOHR_TARGET_PORT:-$(cat "$TARGET_PORT_FILE" 2>/dev/null || echo 0)}"
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
# Seconds to wait for each process to come up, and for the run to end.
WAIT_UP=30
WAIT_RUN=60

# The quickstart is the embedded default: a store or controller named in the caller's
# environment (for a real installation) must not take over.
unset IOHR_DATA_DIR IOHR_DATABASE_URL IOHR_CONTROLLER IOHR_AGENT_IDENTITY

say() { printf 'quickstart: %s\n' "$*" >&2; }

# --- processes ---------------------------------------------------------------------

# The pid in a pid file, if that process is alive and is still the binary we started.
live_pid() {
    local name=$1 pid
    [ -f "$PIDS/$name.pid" ] || return 1
    pid=$(cat "$PIDS/$name.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    if [ -r "/proc/$pid/cmdline" ]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "iohr" || return 1
    fi
    echo "$pid"
}

stop_one() {
    local name=$1 pid
    if pid=$(live_pid "$name"); then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            say "$name (pid $pid) did not stop within 10 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        say "stopped $name (pid $pid)"
    fi
    rm -f "$PIDS/$name.pid"
}

down() {
    # The agent first, so it does not spend the controller's last seconds reconnecting.
    stop_one agent
    stop_one controller
    stop_one target
}

# Stops what this invocation started (a build that fails leaves a running quickstart alone).
stop_started() {
    local name started=" ${STARTED[*]-} "
    for name in agent controller target; do
        case "$started" in *" $name "*) stop_one "$name" ;; esac
    done
}

status() {
    local name pid any=0
    for name in target controller agent; do
        if pid=$(live_pid "$name"); then
            echo "$name: running (pid $pid), log $LOGS/$name.log"
            any=1
        else
            echo "$name: not running"
        fi
    done
    if [ "$any" = 1 ] && [ -f "$ENV_FILE" ]; then
        echo "exports: source $ENV_FILE"
    fi
}

# Starts a process in the background, detached from this shell's hangups; its stdout and
# stderr go to LOGS/NAME.log (the previous start's log is kept as NAME.log.prev).
start_bg() {
    local name=$1
    shift
    if [ -f "$LOGS/$name.log" ]; then
        mv "$LOGS/$name.log" "$LOGS/$name.log.prev"
    fi
    # Logs are files: no colour escapes in them.
    NO_COLOR=1 nohup "$@" </dev/null >"$LOGS/$name.log" 2>&1 &
    echo $! >"$PIDS/$name.pid"
    STARTED+=("$name")
}

# Waits for a line matching REGEX in NAME's log and prints its first match; fails if the
# process exits or WAIT_UP seconds pass.
wait_line() {
    local name=$1 regex=$2 line
    for _ in $(seq 1 $((WAIT_UP * 10))); do
        line=$(grep -Eom1 "$regex" "$LOGS/$name.log" || true)
        if [ -n "$line" ]; then
            echo "$line"
            return 0
        fi
        if ! live_pid "$name" >/dev/null; then
            say "$name exited before it was ready"
            return 1
        fi
        sleep 0.1
    done
    say "$name was not ready within $WAIT_UP s"
    return 1
}

# The errors and last lines of the logs of what this invocation started.
show_logs() {
    local name
    for name in ${STARTED[@]+"${STARTED[@]}"}; do
        if [ -s "$LOGS/$name.log" ]; then
            echo "--- $LOGS/$name.log (errors, then the last lines)" >&2
            grep -E '^Error:| ERROR | WARN ' "$LOGS/$name.log" | head -n 5 >&2 || true
            tail -n 10 "$LOGS/$name.log" >&2
            if grep -q 'Address already in use' "$LOGS/$name.log"; then
                say "a port is taken: choose others with IOHR_API_PORT, IOHR_AGENT_PORT or IOHR_TARGET_PORT"
            fi
        fi
    done
}

# --- commands ----------------------------------------------------------------------

case "${1:-up}" in
up) ;;
down)
    down
    exit 0
    ;;
status)
    status
    exit 0
    ;;
*)
    echo "usage: deploy/quickstart.sh [up|status|down]" >&2
    exit 2
    ;;
esac

[ "${IOHR_QUICKSTART_NO_BUILD:-}" = 1 ] || command -v cargo >/dev/null || {
    say "cargo is not installed: see https://rustup.rs"
    exit 1
}

finished=0
STARTED=()
on_exit() {
    local status=$?
    if [ "$finished" != 1 ]; then
        [ "$status" != 0 ] || status=1
        say "failed; stopping what was started (logs stay in $LOGS/)"
        show_logs
        stop_started
    fi
    exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Only the four binaries this script runs: `--bins` would also build the iohr-bench-*
# tools and their dependencies, which a first try never needs.
if [ "${IOHR_QUICKSTART_NO_BUILD:-}" != 1 ]; then
    say "building the binaries (cargo build --bin iohr-controller --bin iohr-agent --bin iohr --bin iohr-sample-target)"
    cargo build --bin iohr-controller --bin iohr-agent --bin iohr --bin iohr-sample-target
fi

mkdir -p "$LOGS" "$PIDS"
chmod 700 "$STATE"
# A previous quickstart's processes are restarted, not doubled.
down

# The controller's CA, server certificate and the account `default` (kept if they exist).
"$BIN/iohr-controller" init --data-dir "$DATA" >&2

# The agent's certificate, issued again if the controller's CA changed since.
if ! cmp -s "$AGENT_DIR/ca.pem" "$DATA/pki/ca.pem" 2>/dev/null || [ ! -f "$AGENT_DIR/agent.key" ]; then
    rm -rf "$AGENT_DIR"
    "$BIN/iohr-controller" agent-cert --data-dir "$DATA" --account default \
        --agent "$AGENT_NAME" --out "$AGENT_DIR" >&2
fi

new_token() {
    (umask 077 && "$BIN/iohr-controller" token create --data-dir "$DATA" --account default \
        --scope reliability:run --scope reliability:read --scope reliability:admin \
        --scope reliability:audit --person "${USER:-quickstart}" |
        tail -n 1 >"$TOKEN_FILE.new")
    mv "$TOKEN_FILE.new" "$TOKEN_FILE"
    echo "$TOKEN_SCOPES" >"$TOKEN_FILE.scopes"
    say "created your token (in $TOKEN_FILE)"
}
# The scopes a token of this script holds; a token made by an older script (without
# reliability:audit) is replaced.
TOKEN_SCOPES="run read admin audit"
if [ ! -s "$TOKEN_FILE" ] || [ "$(cat "$TOKEN_FILE.scopes" 2>/dev/null)" != "$TOKEN_SCOPES" ]; then
    new_token
fi

say "starting the sample target"
start_bg target "$BIN/iohr-sample-target" --listen "127.0.0.1:$TARGET_PORT" --max-seconds 2592000
TARGET=$(wait_line target '^listening on http://[^ ]+' | sed 's/^listening on //')
echo "${TARGET##*:}" >"$TARGET_PORT_FILE"

say "starting the controller"
# Webhooks to loopback are refused by default (docs/security.md); this demo allows them
# so that a receiver on this machine can subscribe.
start_bg controller "$BIN/iohr-controller" serve --data-dir "$DATA" \
    --api-addr "127.0.0.1:$API_PORT" --agent-addr "127.0.0.1:$AGENT_PORT" \
    --allow-webhook-target 127.0.0.0/8
SERVER=$(wait_line controller '^api listening on http://[^ ]+' | sed 's/^api listening on //')
LINK=$(wait_line controller '^agent link listening on https://[^ ]+' | sed 's/^agent link listening on //')

say "starting agent $AGENT_NAME"
# examples/checks-api.json sends `Authorization: ${env:SAMPLE_TARGET_TOKEN}`: the agent
# reads the value from its own environment, and only because --secret-env grants that
# name to runs (none is by default; this demo value is no secret). The agent is this
# account's own, so its deny-list is off and it reaches the sample target on loopback
# (a platform agent would need --allow-target 127.0.0.0/8; docs/security.md).
# Its fault policy lets faults runs act on the sample target's port (through the fault
# proxy) and nothing else; its fault ledger lives in the data dir.
printf '{"target_ports": [%s]}\n' "${TARGET##*:}" > "$DATA/agent-policy.json"
SAMPLE_TARGET_TOKEN="${SAMPLE_TARGET_TOKEN:-quickstart-demo}" \
    start_bg agent "$BIN/iohr-agent" run --controller "$LINK" --identity "$AGENT_DIR" \
    --environment staging --max-concurrent-jobs 4 \
    --policy "$DATA/agent-policy.json" --state-dir "$DATA/agent-state" \
    --secret-env SAMPLE_TARGET_TOKEN

iohr() { "$BIN/iohr" --server "$SERVER" --token "$(cat "$TOKEN_FILE")" "$@"; }

# A token from an earlier data dir is not known to this one: make a new one.
if ! answer=$(iohr reliability agents 2>&1 >/dev/null); then
    case "$answer" in
    *unauthorized*) new_token ;;
    *)
        say "the API does not answer: $answer"
        exit 1
        ;;
    esac
fi

say "waiting for agent $AGENT_NAME to come online"
online=0
for _ in $(seq 1 $((WAIT_UP * 4))); do
    if iohr --json reliability agents 2>/dev/null |
        grep -Eq "\"name\":\"$AGENT_NAME\"[^{}]*\"online\":true|\"online\":true[^{}]*\"name\":\"$AGENT_NAME\""; then
        online=1
        break
    fi
    live_pid agent >/dev/null || break
    sleep 0.25
done
if [ "$online" != 1 ]; then
    say "agent $AGENT_NAME did not come online within $WAIT_UP s"
    exit 1
fi

{
    printf 'export IOHR_SERVER=%s\n' "$SERVER"
    printf 'export IOHR_TOKEN=%s\n' "$(cat "$TOKEN_FILE")"
} >"$ENV_FILE"
chmod 600 "$ENV_FILE"

say "starting a checks run of examples/checks.json against $TARGET (frames below, record after)"
set +e
iohr reliability run --kind checks --environment staging --target "$TARGET" \
    --spec examples/checks.json --wait --timeout "$WAIT_RUN"
verdict=$?
set -e
if [ "$verdict" != 0 ]; then
    say "the run did not pass (exit $verdict)"
    exit "$verdict"
fi

finished=1
cat <<EOF

The installation is up (logs in $LOGS/):
  controller     $SERVER, agent link $LINK, store $DATA/iohr.db
  agent          $AGENT_NAME, environment staging, 4 jobs at once
  sample target  $TARGET (the same port after a restart)

The console: $SERVER/ (sign in with the token in $TOKEN_FILE, yours as
the account's admin; iohr-controller account open-console default opens it to others).

Start more from this shell (the same lines are in $ENV_FILE):

  export IOHR_SERVER=$SERVER
  export IOHR_TOKEN=$(cat "$TOKEN_FILE")
  PATH="$BIN:\$PATH"

  iohr reliability run --kind checks --environment staging --target $TARGET \\
    --spec examples/checks-api.json --wait
  iohr reliability run --kind faults --environment staging --target $TARGET \\
    --spec examples/faults.json --wait
  iohr reliability findings
  iohr reliability runs list
  iohr reliability runs show RUN_ID
  iohr reliability runs events RUN_ID
  iohr reliability agents

  # A schedule: the same checks every day at 03:00 UTC (crontab's five fields)
  iohr reliability schedules create --name nightly --cron "0 3 * * *" --kind checks \\
    --environment staging --target $TARGET --spec examples/checks-api.json
  iohr reliability schedules list   # with each one's next fire time

  deploy/quickstart.sh status   # what is running
  deploy/quickstart.sh down     # stop everything this started
EOF
