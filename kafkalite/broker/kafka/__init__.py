"""Kafka's wire protocol: the second front end of the broker, over the same services as ``http``.

``context`` holds what every API handler receives and returns; the listener, the framing and the
handlers of each API family live in the modules beside it.
"""
