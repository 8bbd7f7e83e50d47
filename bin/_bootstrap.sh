# Shared set-up for bin/test and bin/cluster (sourced, not run). Idempotent and quick when
# everything is already there: creates .venv, installs the project with its test extras
# when pyproject.toml changed, and makes sure Debian's ZooKeeper (and optional extra
# Debian packages named in KAFKALITE_APT_EXTRA) are installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

_log() { printf '[bootstrap] %s\n' "$*" >&2; }

_find_python() {
    for cand in python3.13 python3.12 python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            command -v "$cand"; return 0
        fi
    done
    return 1
}

bootstrap_venv() {
    if [ ! -x "$PY" ]; then
        local sys_py
        sys_py="$(_find_python)" || { echo "kafkalite needs Python 3.11 or newer (python3.11+ not found on PATH)" >&2; exit 1; }
        _log "creating $VENV with $sys_py"
        "$sys_py" -m venv "$VENV"
        "$PY" -m pip install -q --upgrade pip >&2
    fi
    local stamp="$VENV/.kafkalite-installed" want
    want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        _log "installing kafkalite and its test dependencies into .venv"
        "$PY" -m pip install -q -e "$ROOT[test,spark]" >&2
        echo "$want" > "$stamp"
    fi
}

_apt_install() {
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        _log "installing Debian packages: $*"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2 || true
        apt-get install -y -qq "$@" >&2
    else
        echo "missing system packages: $*" >&2
        echo "install them with: sudo apt-get install $*   (or set ZOOKEEPER_CLASSPATH to your ZooKeeper jars)" >&2
        exit 1
    fi
}

bootstrap_system() {
    local need=()
    if [ -z "${ZOOKEEPER_CLASSPATH:-}" ] && [ ! -f /usr/share/java/zookeeper.jar ]; then
        need+=(zookeeper)
    fi
    if ! command -v java >/dev/null 2>&1; then
        need+=(default-jre-headless)
    fi
    for pkg in ${KAFKALITE_APT_EXTRA:-}; do
        if ! dpkg -s "$pkg" >/dev/null 2>&1; then need+=("$pkg"); fi
    done
    if [ "${#need[@]}" -gt 0 ]; then
        _apt_install "${need[@]}"
    fi
}

# Debian packages that help but are not required (KAFKALITE_APT_OPTIONAL, e.g. kcat for the
# README's tour): installed when running as root with apt-get, otherwise named with the
# command that installs them; a failure to install them never stops the caller.
bootstrap_optional() {
    local missing=()
    for pkg in ${KAFKALITE_APT_OPTIONAL:-}; do
        if ! dpkg -s "$pkg" >/dev/null 2>&1; then missing+=("$pkg"); fi
    done
    [ "${#missing[@]}" -gt 0 ] || return 0
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        _log "installing optional Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -qq "${missing[@]}" >&2; then
            apt-get update -qq >&2 || true
            apt-get install -y -qq "${missing[@]}" >&2 || _log "could not install ${missing[*]}; carrying on without"
        fi
    else
        _log "optional packages not installed: ${missing[*]} (sudo apt-get install ${missing[*]})"
    fi
}

bootstrap_all() {
    bootstrap_system
    bootstrap_optional
    bootstrap_venv
}
