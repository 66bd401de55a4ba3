#!/usr/bin/env bash
# One command from a fresh clone to a working kafkalite: installs what is missing
# (scripts/install.sh), then shows the storage engine at work on a demo log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/install.sh"
cd "$here"
exec .venv/bin/python -m kafkalite.tools.storage_demo --dir "$here/var/demo-logs"
