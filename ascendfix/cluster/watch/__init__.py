"""watch: name a stalled rank of a running Ray job, live, from evidence of progress.

``probe`` runs on each node (a Ray task pinned there, ``num_cpus=0``; the standard library only,
shipped by value): it reads each rank's ``/proc/PID`` (process title, state, CPU ticks, wait
channel) and, when asked, dumps its Python stack with py-spy and reads its NPU's AICore % from
``npu-smi info``. ``rules`` is the detector: it learns each method's durations and quiet stretches
from the run itself, tells a stall (every rank of one call without progress past the learned bound:
no CPU, no AICore, stacks unchanged) from a long tail, and names the culprits. ``follow`` is the
loop on Ray: the jobs, their alive actors, one probe per node a poll. Ray is imported only inside
``follow``'s functions.

May import: of its wing ``cluster``, ``fanout`` and ``wait`` (Ray and the address rules), nothing else of ascendfix.
"""
