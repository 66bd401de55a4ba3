# Sourced by the scripts in this folder: finds the repository and its Python.
# KAFKALITE_HOME may point elsewhere (for example inside a container image).
KAFKALITE_HOME="${KAFKALITE_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export KAFKALITE_HOME
if [ -n "${KAFKALITE_PYTHON:-}" ]; then
  PYTHON="$KAFKALITE_PYTHON"
elif [ -x "$KAFKALITE_HOME/.venv/bin/python" ]; then
  PYTHON="$KAFKALITE_HOME/.venv/bin/python"
else
  PYTHON="$(command -v python3)"
fi
export PYTHONPATH="$KAFKALITE_HOME${PYTHONPATH:+:$PYTHONPATH}"

# Run a kafkalite module as a tool with the given arguments.
kafkalite_tool() {
  local module="$1"; shift
  exec "$PYTHON" -m "$module" "$@"
}
