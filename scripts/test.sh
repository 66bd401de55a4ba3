#!/usr/bin/env bash
# Runs the whole test suite (unit and integration, with real ZooKeeper and broker processes).
# Installs what it needs first (scripts/install.sh). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/install.sh" --spark
cd "$here"
exec .venv/bin/python -m pytest "$@"
