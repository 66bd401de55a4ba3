"""Shared plumbing of the command-line tools: argument errors and exit codes.

Exit codes: 0 success, 1 the operation failed (a named error is printed), 2 bad arguments,
130 interrupted. User mistakes never print a Python traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn

from kafkalite.errors import KafkaliteError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ToolArgumentParser(argparse.ArgumentParser):
    """argparse with Kafka-tool style errors: ``Error: ...`` plus usage, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"Error: {message}\n")


def run_tool(main: Callable[[], int]) -> int:
    """Run a tool's main, turning kafkalite errors into a one-line message and exit code 1."""
    try:
        return main()
    except KafkaliteError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
