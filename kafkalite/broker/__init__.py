"""The broker: storage, replication, controller and the HTTP API of one process.

Layers: ``metadata`` (ZooKeeper-fed cluster view) → ``partition`` / ``replica`` /
``fetcher`` (hosted replicas, produce and fetch, follower replication) → ``controller``
(elected broker's duties) and ``admin`` (topic and config administration) → ``http``
(aiohttp API) → ``server`` (composition root and lifecycle).
"""
