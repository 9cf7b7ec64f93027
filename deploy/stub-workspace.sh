#!/bin/sh
# Stands in for every source file the workspace's manifests name, so that
# `cargo build` compiles the dependencies alone: the Dockerfile's
# dependency layer, rebuilt only when a manifest or Cargo.lock changes.
# Run from the workspace root holding only the manifests, Cargo.lock and
# build.rs. Each crate gets an empty src/lib.rs; each [[bin]], [[test]],
# [[bench]] and [[example]] its named (or conventional) file with an empty
# main. The real sources are copied over the stubs afterwards.
set -eu
for manifest in Cargo.toml */Cargo.toml; do
  dir=$(dirname "$manifest")
  mkdir -p "$dir/src"
  [ -e "$dir/src/lib.rs" ] || : > "$dir/src/lib.rs"
  awk '
    function flush() {
      if (kind != "") {
        if (path == "") path = folder[kind] "/" name ".rs"
        print path
      }
      kind = ""; name = ""; path = ""
    }
    BEGIN { folder["bin"] = "src/bin"; folder["test"] = "tests"; folder["bench"] = "benches"; folder["example"] = "examples" }
    /^\[\[(bin|test|bench|example)\]\]/ { flush(); kind = $0; gsub(/[][ ]/, "", kind); next }
    /^\[/ { flush(); next }
    kind != "" && /^name *=/ { v = $0; sub(/^[^"]*"/, "", v); sub(/".*/, "", v); name = v }
    kind != "" && /^path *=/ { v = $0; sub(/^[^"]*"/, "", v); sub(/".*/, "", v); path = v }
    END { flush() }
  ' "$manifest" | while read -r target; do
    mkdir -p "$dir/$(dirname "$target")"
    [ -e "$dir/$target" ] || echo 'fn main() {}' > "$dir/$target"
  done
done
