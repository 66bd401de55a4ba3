"""A Confluent-compatible schema registry built into the brokers, and its serdes.

- :mod:`~kafkalite.registry.schemas` — schema types, parsing, canonical forms;
- :mod:`~kafkalite.registry.avro_compat`, :mod:`~kafkalite.registry.json_compat`,
  :mod:`~kafkalite.registry.compatibility` — schema resolution and the compatibility levels;
- :mod:`~kafkalite.registry.records` — the ``_schemas`` topic's keys and values (Confluent's format);
- :mod:`~kafkalite.registry.store` — the in-memory view built from ``_schemas`` and the one writer;
- :mod:`~kafkalite.registry.api` — the REST API (aiohttp), mounted under ``/registry`` on every
  broker and optionally served on its own port (``schema.registry.listeners``);
- :mod:`~kafkalite.registry.client` — a small blocking REST client with caches;
- :mod:`~kafkalite.registry.serdes` — Avro and JSON Schema serializers in Confluent's wire format.

The server part reaches the broker only through :class:`~kafkalite.registry.store.SchemaTopic`,
which the broker implements; the package never imports broker code.
"""
