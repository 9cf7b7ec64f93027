#!/usr/bin/env bash
# Writes build/hot-code.order: the functions of the release binary that the
# broker runs on its message path, for the linker to lay out side by side
# (build.rs passes the list to LLD as --symbol-ordering-file; why, and what
# it saves: BENCHMARKS.md, "Code laid out by use").
#
# The path is `mnemo bench`'s (start-up, the real App's turns with recall on
# the files store, a history's seeding and its index rebuild), one turn of
# `mnemo chat` (the console, a config file, a `command` model) and `mnemo
# run` serving Telegram (benches/run_load.rs, with its fake Bot API and
# model). Slack's and Discord's clients are not profiled. Run it again
# after a change to that path or to the release profile (a profile change
# renames every symbol); a stale list only lays out fewer functions
# together. Needs valgrind (apt-get install valgrind) and about 10 minutes:
# two release builds, a debug build of the run_load bench, callgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || {
    echo "hot-code.sh needs valgrind (apt-get install valgrind)" >&2
    exit 1
}
target=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The binary the list is for: the release profile exactly (its symbols'
# names depend on the profile), laid out by the current list or none.
cargo build --release --locked --bin mnemo
bin="$target/release/mnemo"

# Runs the binary under callgrind; its output goes to $work/$1.callgrind.
profile() {
    local name=$1
    shift
    valgrind --tool=callgrind --demangle=no --dump-instr=no --collect-jumps=no \
        --callgrind-out-file="$work/$name.callgrind" "$@" >/dev/null 2>"$work/$name.log" || {
        cat "$work/$name.log" >&2
        exit 1
    }
}

echo "== the message path under callgrind: mnemo bench, then one mnemo chat turn" >&2
profile bench "$bin" bench --users 2 --turns 60 --history 3000 --json
printf '{"model": {"provider": "command", "command": ["echo", "{message}"]}, "stateDir": "%s"}\n' \
    "$work/state" >"$work/chat.json"
echo hello | profile chat "$bin" --config "$work/chat.json" chat

# The Telegram path: `mnemo run` long-polling the fake Bot API of
# benches/run_load.rs (its test size, 20 users × 3 turns) through a wrapper
# that runs the binary under callgrind.
echo "== mnemo run with Telegram under callgrind (benches/run_load.rs)" >&2
cat >"$work/mnemo-under-callgrind" <<WRAPPER
#!/bin/sh
exec valgrind --tool=callgrind --demangle=no --dump-instr=no --collect-jumps=no \\
    --callgrind-out-file="$work/telegram.%p.callgrind" "$(realpath "$bin")" "\$@" 2>>"$work/telegram.log"
WRAPPER
chmod +x "$work/mnemo-under-callgrind"
MNEMO_LOAD_BIN="$work/mnemo-under-callgrind" MNEMO_LOAD_USERS=20 MNEMO_LOAD_TURNS=3 \
    cargo test --locked --bench run_load >"$work/run_load.log" 2>&1 || {
    cat "$work/run_load.log" "$work/telegram.log" >&2
    exit 1
}

# Every function callgrind saw run (it names each once, as `fn=(id) name`
# or `cfn=(id) name`), first seen first, that is code of the binary itself.
nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u >"$work/text"
cat "$work/bench.callgrind" "$work/chat.callgrind" "$work"/telegram.*.callgrind | sed -nE 's/^c?fn=\([0-9]+\) (.+)$/\1/p' |
    awk '!seen[$0]++' | grep -Fxf "$work/text" >"$work/order"
count=$(wc -l <"$work/order")
if [ "$count" -lt 500 ]; then
    echo "only $count functions of the binary ran: is it the release build with its symbols?" >&2
    exit 1
fi
mv "$work/order" build/hot-code.order
echo "build/hot-code.order: $count functions; build the release again to lay them out" >&2
