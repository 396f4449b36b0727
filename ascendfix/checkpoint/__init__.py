"""checkpoint: distributed-checkpoint checks.

``scan_probe`` runs torch's own overlap check, on stand-in types, and counts its work (the
torch patches' drop probe).

May import: the loose modules ``errors``, ``states``, ``resources``, ``fsutil``. Never torch.
"""
