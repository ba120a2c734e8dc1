#!/usr/bin/env bash
# Prepare a private Python venv holding a pinned DI-engine release from PyPI,
# so hack/ding/k8s_parser_check.py can run DI-engine's own K8SParser and
# hack/ding/operator_client.py its coordinator's client of the replica endpoint.
#
# Usage:  py=$(hack/ding/setup.sh | tail -1)
#         "$py" hack/ding/k8s_parser_check.py < pods.json
#
# stdout: the venv's python path, as the last line. Progress goes to stderr.
# Idempotent: a second run only checks the venv (well under a second).
#
# Environment:
#   DI_CACHE_DIR    cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/di-orchestrator)
#   DING_PYTHON     interpreter used to create the venv (default python3)
set -euo pipefail

# The DI-engine release we check against. To bump: change this line, run this
# script, then run the parser check (see hack/ding/README.md).
DING_VERSION=0.5.3

log() { printf 'hack/ding/setup.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

base_py=${DING_PYTHON:-python3}
command -v "$base_py" >/dev/null 2>&1 || die "'$base_py' not found; install Python 3 (>=3.9) or set DING_PYTHON"

py_mm=$("$base_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
py_real=$("$base_py" -c 'import os, sys; print(os.path.realpath(sys.executable))')

# k8s_parser.py imports only os, time, typing and numpy. DI-engine 0.5.3
# declares numpy>=1.18,<2; 1.26.4 is the last such release and has wheels up to
# Python 3.12. Newer interpreters only have numpy 2 wheels; the parser only
# calls np.concatenate, which behaves the same there.
case "$py_mm" in
    3.9 | 3.10 | 3.11 | 3.12) numpy_spec=numpy==1.26.4 ;;
    3.[0-8]) die "Python $py_mm is too old; need >=3.9 (set DING_PYTHON)" ;;
    *) numpy_spec=numpy==2.2.6 ;;
esac

cache_root=${DI_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:?HOME is unset; set DI_CACHE_DIR}/.cache}/di-orchestrator}
venv="$cache_root/ding/$DING_VERSION"
venv_py="$venv/bin/python"
stamp="$venv/.di-orchestrator-stamp"
# What DI-engine 0.5.3's OperatorServer (its coordinator's client of the replica
# endpoint) imports besides the standard library, at the versions it declares.
client_specs=("flask==2.0.3" "werkzeug==2.0.3" "requests==2.32.3" "URLObject==3.0.0")
want_stamp="DI-engine==$DING_VERSION $numpy_spec ${client_specs[*]} python=$py_real ($py_mm)"

mkdir -p "$cache_root/ding"

# Serialise concurrent callers (tests may run in parallel).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache_root/ding/.lock"
    flock 9
fi

venv_ok() {
    [[ -x "$venv_py" && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] || return 1
    "$venv_py" - "$DING_VERSION" <<'EOF' >/dev/null 2>&1
import os, site, sys
from importlib.metadata import version
import numpy  # noqa: F401  (the parser's only third-party import)
import flask, requests, urlobject  # noqa: F401  (the operator client's)
assert version("DI-engine") == sys.argv[1]
rel = os.path.join("ding", "entry", "cli_parsers", "k8s_parser.py")
assert any(os.path.isfile(os.path.join(d, rel)) for d in site.getsitepackages())
EOF
}

if venv_ok; then
    log "DI-engine $DING_VERSION venv ready at $venv"
else
    start=$SECONDS
    if ! "$base_py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        die "Python's venv/ensurepip modules are missing for $base_py ($py_mm).
  On Debian/Ubuntu: apt-get install python3-venv (or python$py_mm-venv)."
    fi
    case "$venv" in
        */ding/"$DING_VERSION") rm -rf -- "$venv" ;;
        *) die "refusing to remove unexpected path $venv" ;;
    esac
    log "creating venv $venv with $py_real"
    "$base_py" -m venv "$venv" >&2
    log "installing DI-engine==$DING_VERSION (--no-deps) and $numpy_spec from PyPI"
    if ! "$venv_py" -m pip install --disable-pip-version-check --no-input --quiet --no-compile \
        --no-deps --only-binary=:all: "DI-engine==$DING_VERSION" "$numpy_spec" >&2; then
        die "pip install failed (is PyPI reachable?)"
    fi
    log "installing the operator client's dependencies: ${client_specs[*]}"
    if ! "$venv_py" -m pip install --disable-pip-version-check --no-input --quiet --no-compile \
        --no-warn-conflicts --only-binary=:all: "${client_specs[@]}" >&2; then
        die "pip install of the operator client's dependencies failed (is PyPI reachable?)"
    fi
    printf '%s\n' "$want_stamp" >"$stamp"
    venv_ok || die "venv at $venv failed its self-check after install"
    log "DI-engine $DING_VERSION installed in $((SECONDS - start))s"
fi

printf '%s\n' "$venv_py"
