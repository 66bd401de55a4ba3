#!/usr/bin/env bash
# Installs what kafkalite needs on Debian, idempotently:
#   - Debian packages (ZooKeeper and its SLF4J backend, a Java runtime, curl, Chromium and its
#     ChromeDriver for the console's browser tests) when missing;
#   - a virtualenv in .venv with kafkalite and its test (and, with --spark, Spark) extras;
#   - kcat (Debian) and kafkajs (npm, pinned by tests/js/package-lock.json into tests/js/node_modules),
#     the non-Python Kafka clients tests/integration/test_kafka_tools.py runs.
# With --run, only what running a cluster and Spark jobs needs (scripts/quickstart.sh): ZooKeeper, Java,
# the compiler for the C extensions, curl, and .venv with kafkalite and its spark extra; no browser, no
# Node, no kcat, no iptables and no test dependencies.
# Re-running is cheap: the virtualenv is refreshed only when setup.cfg changed, node_modules only
# when the lock file changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
extras="test"
run_only=""
for argument in "$@"; do
  case "$argument" in
    --spark) extras="test,spark" ;;
    --run) run_only=1 ;;
    -h|--help) echo "usage: scripts/install.sh [--spark | --run]"; exit 0 ;;
    *) echo "Error: unknown option $argument" >&2; exit 2 ;;
  esac
done
if [ -n "$run_only" ]; then extras="spark"; fi

need_apt=()
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
[ -f /usr/share/java/slf4j-simple.jar ] || need_apt+=(libslf4j-java)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ -z "$run_only" ]; then
  # The network-partition tests put ZooKeeper, brokers and clients in network namespaces.
  PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
  PATH="$PATH:/usr/sbin:/sbin" command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
  command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
fi
# The compiled record codec (setup.py) needs a C compiler and Python's headers; without them kafkalite runs
# its pure-Python code.
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need_apt+=(python3-dev)
# README's examples (tested) read the brokers' HTTP API with curl.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ -z "$run_only" ]; then
  # The web console's tests drive Debian's Chromium through its ChromeDriver (tests/integration/test_console.py).
  [ -x /usr/bin/chromium ] || need_apt+=(chromium)
  [ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
fi

stamp=".venv/.kafkalite-installed"
want="$(cat setup.cfg pyproject.toml setup.py | sha256sum | cut -c1-16) $extras"
if [ ! -x .venv/bin/python ]; then
  echo "creating virtualenv .venv"
  python3 -m venv .venv
fi
installed_extras() {  # the extras the stamp records, when its sources' hash is today's
  [ -f "$stamp" ] || return 0
  read -r hash recorded < "$stamp" || true
  if [ "$hash" = "${want%% *}" ]; then echo "$recorded" | tr ',' ' '; fi
  return 0
}
missing_extra=""
present=" $(installed_extras) "
for extra in ${extras//,/ }; do
  case "$present" in *" $extra "*) ;; *) missing_extra=1 ;; esac
done
if [ -n "$missing_extra" ]; then
  echo "installing kafkalite[$extras] into .venv"
  log=".venv/install.log"
  if ! { .venv/bin/python -m pip install -q --upgrade pip setuptools wheel &&
         .venv/bin/python -m pip install -q -e ".[$extras]"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "Error: installing Python packages failed (log above, also in $log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
# The C extensions (setup.py), rebuilt in place whenever a C source is newer than its built module.
stale=""
for source in kafkalite/record/_speedups.c kafkalite/client/_speedups.c kafkalite/security/_tls_records.c; do
  built="$(ls "${source%.c}".*.so 2>/dev/null | head -n 1 || true)"
  if [ -z "$built" ] || [ "$source" -nt "$built" ]; then stale="$stale $source"; fi
done
if [ -n "$stale" ]; then
  echo "building the C extensions:$stale"
  if ! .venv/bin/python setup.py -q build_ext --inplace >".venv/build-ext.log" 2>&1; then
    echo "Warning: the C extensions did not build (.venv/build-ext.log); kafkalite runs its pure-Python code" >&2
  fi
fi

if [ -n "$run_only" ]; then
  exit 0
fi
# kafkajs for the Node client tests (Node 20 and npm come with the machine, see README).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "Error: node and npm are required (Node 20) to install kafkajs into tests/js" >&2
  exit 1
fi
js_stamp="tests/js/node_modules/.kafkalite-installed"
js_want="$(sha256sum tests/js/package-lock.json | cut -c1-16)"
if [ ! -f "$js_stamp" ] || ! grep -qxF "$js_want" "$js_stamp"; then
  echo "installing kafkajs into tests/js/node_modules"
  if ! (cd tests/js && npm ci --no-audit --no-fund --loglevel=error) >".venv/npm-install.log" 2>&1; then
    cat .venv/npm-install.log >&2
    echo "Error: npm ci in tests/js failed (log above, also in .venv/npm-install.log)" >&2
    exit 1
  fi
  echo "$js_want" > "$js_stamp"
fi
