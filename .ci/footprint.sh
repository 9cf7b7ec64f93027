# Sourced by .ci/run: issue 40's done-when on memory, on the binary
# operators run. The release build (whole-program LTO: the longest step on
# a 2-core machine, ~7 minutes), then one heavy user: 10⁵ messages of
# history, 100 turns, recall on, the files store. `peak_rss_mb` is the
# process's VmHWM over the whole run (the seeding's index rebuild too).
# Above 16 MB fails CI; the likeliest cause is a stale
# build/hot-code.order (CONTRIBUTING.md says how to renew it).

echo "== release build and a heavy user's footprint (issue 40's done-when)"
cargo build --release --locked --bin mnemo
footprint_report=$("${CARGO_TARGET_DIR:-target}/release/mnemo" bench --users 1 --turns 100 \
    --history 100000 --json | tail -n 1)
python3 - "$footprint_report" <<'PY'
import json, sys

report = json.loads(sys.argv[1])
peak = report["peak_rss_mb"]
if peak is None:
    sys.exit("the bench read no peak RSS (/proc/self/status)")
print(f"history {report['history']}: peak RSS {peak:.1f} MB, first turn "
      f"{report['first_p50_us'] / 1000:.1f} ms, later p50 {report['later_p50_us']} µs")
if peak > 16:
    sys.exit(f"peak RSS {peak} MB is over issue 40's 16 MB: is build/hot-code.order stale? "
             "Run scripts/hot-code.sh (CONTRIBUTING.md).")
PY
