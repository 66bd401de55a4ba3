"""A local cluster on loopback: real ZooKeeper and broker processes, and the verifiable tools.

:mod:`.zookeeper` starts Debian's ZooKeeper (standalone or a 3-node ensemble), :mod:`.cluster`
starts broker processes against it, :mod:`.verifiable` runs the verifiable producer and
consumer and follows their JSON events. The benchmarks (:mod:`kafkalite.bench`) use them from
an installed package; the integration tests build their helpers on them.
"""
