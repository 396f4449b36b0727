"""``ray smoke``: real collectives across every node of the Ray cluster, and the node a bad link belongs to.

``driver`` runs it on the driver (and ``run --smoke``); ``node`` is the task each node runs to check
its NICs and NPU ports; ``rank`` the Ray actor running ``torch.distributed`` (torch only inside it);
``links`` the pairwise link phase and who it blames; ``report`` what it all reports.
"""
