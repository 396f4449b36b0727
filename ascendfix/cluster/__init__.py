"""cluster: the Ray cluster — one command on every node, and the nodes' start and arrival.

``fanout`` runs an ascendfix command on every alive node (``--ray``) and tables what they said;
``start`` is ``ray start`` with the profile's environment and NPU resource; ``wait`` waits for
the nodes and compares what each sees; ``smoke`` checks each node's NICs and runs real
collectives across them (torch only inside its Ray actors). Ray itself is imported only when
one of them runs.

May import: ``profile``, ``doctor`` (npu-smi's parser) and the loose modules ``errors``,
``states``, ``resources``, ``fsutil``.
"""
