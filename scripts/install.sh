#!/usr/bin/env bash
# Installs what kafkalite needs on Debian, idempotently:
#   - Debian packages (ZooKeeper and its SLF4J backend, a Java runtime) when missing;
#   - a virtualenv in .venv with kafkalite and its test (and, with --spark, Spark) extras.
# Re-running is cheap: the virtualenv is refreshed only when setup.cfg changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
extras="test"
for argument in "$@"; do
  case "$argument" in
    --spark) extras="test,spark" ;;
    -h|--help) echo "usage: scripts/install.sh [--spark]"; exit 0 ;;
    *) echo "Error: unknown option $argument" >&2; exit 2 ;;
  esac
done

need_apt=()
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
[ -f /usr/share/java/slf4j-simple.jar ] || need_apt+=(libslf4j-java)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# The network-partition tests put ZooKeeper, brokers and clients in network namespaces.
PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
PATH="$PATH:/usr/sbin:/sbin" command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
  $SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
fi

stamp=".venv/.kafkalite-installed"
want="$(cat setup.cfg pyproject.toml | sha256sum | cut -c1-16) $extras"
if [ ! -x .venv/bin/python ]; then
  echo "creating virtualenv .venv"
  python3 -m venv .venv
fi
if [ ! -f "$stamp" ] || ! grep -qxF "$want" "$stamp"; then
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
