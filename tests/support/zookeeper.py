"""Real ZooKeeper servers for tests: the package's launcher (kafkalite.local.zookeeper).

``LAUNCHER_SCRIPT`` is the shell launcher of the checkout, which tests exercise too.
"""

from __future__ import annotations

from pathlib import Path

from kafkalite.local.zookeeper import (
    ENSEMBLE_TEMPLATE,
    STANDALONE_TEMPLATE,
    QuorumMember,
    ZooKeeperEnsemble,
    ZooKeeperLaunchError,
    ZooKeeperServer,
    ensure_zookeeper_installed,
    four_letter_word,
    free_ports,
    java_command,
    render_config,
)

LAUNCHER_SCRIPT = Path(__file__).resolve().parents[2] / "zk" / "zookeeper.sh"

__all__ = [
    "ENSEMBLE_TEMPLATE", "LAUNCHER_SCRIPT", "STANDALONE_TEMPLATE", "QuorumMember", "ZooKeeperEnsemble",
    "ZooKeeperLaunchError", "ZooKeeperServer", "ensure_zookeeper_installed", "four_letter_word", "free_ports",
    "java_command", "render_config",
]
