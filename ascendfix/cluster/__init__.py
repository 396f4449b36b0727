"""cluster: the Ray cluster — one command on every node, and the nodes' start and arrival.

``fanout`` runs an ascendfix command on every alive node (``--ray``) and tables what they said;
``start`` is ``ray start`` with the profile's environment and NPU resource; ``wait`` waits for
the nodes and compares what each sees; the ``smoke`` package (``ray smoke``) checks each
node's NICs and ports (reading them with doctor's ``nic``), reserves the job's placement, runs real
collectives across the nodes (torch only inside its Ray actors) and names the node a bad link
belongs to. Ray itself is imported only when one of them runs.

May import: ``profile``, ``doctor`` (npu-smi's parser, the NIC grammar, the status values) and the
loose modules ``errors``, ``states``, ``resources``, ``fsutil``, ``tuples``.
"""
