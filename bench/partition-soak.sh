#!/usr/bin/env bash
# Partition soak (issue 34): tests/tests/partition_soak.rs run for a long time. One agent
# in its own network namespace runs exclusive load runs back to back (a 12 s run at
# 20/s each cycle) while, every --every seconds, a fault drawn at random hits its link to
# the controller: a full cut longer than the lease TTL, one shorter, a one-way cut either
# way, 10% loss, or nothing. At the end the checker (tests/src/checker.rs) reads the whole
# history (the target's request log, every run's statuses and stream, the cuts) and its
# verdict is printed; the history is kept in target/partition-histories/partition-soak.json.
#
#   bench/partition-soak.sh [--duration S] [--every S] [--seed N]
#
# Defaults: 1800 s, a fault every 20 s, a seed drawn here and printed (pass it again to
# replay the same faults). Needs what the partition tests need: root, iproute2's `ip` and
# nftables' `nft` (tests/run installs it), and builds the tests in the dev profile.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=1800
EVERY=20
SEED=$(( (RANDOM << 15) | RANDOM ))
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) DURATION=$2; shift 2 ;;
        --every) EVERY=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        *) echo "bench/partition-soak.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

cargo build --workspace --all-targets
echo "partition soak: ${DURATION} s, a fault every ${EVERY} s, seed ${SEED}" >&2
set +e
IOHR_PARTITION_SOAK_SECS=$DURATION IOHR_PARTITION_SOAK_EVERY=$EVERY IOHR_PARTITION_SOAK_SEED=$SEED \
    cargo test -p iohr-tests --test partition_soak -- --nocapture 2>&1 \
    | grep --line-buffered -E '^partition soak|panicked|breaks the promises|^  [A-Za-z]+:|test result'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -eq 0 ]; then
    echo "partition soak: the checker found every promise kept (seed ${SEED})"
else
    echo "partition soak: FAILED (seed ${SEED}); the history is in target/partition-histories/" >&2
fi
exit "$status"
