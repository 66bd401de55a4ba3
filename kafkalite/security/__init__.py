"""Security primitives shared by the broker, the clients and the tools: principals, and the
pieces that neither touch the network nor ZooKeeper (TLS contexts, SCRAM, ACL rules)."""
