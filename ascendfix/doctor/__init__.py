"""``ascendfix doctor``: is this machine ready for the profile's job, and if not, what to do.

One small function per check (see ``registry``), each given a shared ``Context`` and
returning a ``Finding``; ``runner.run`` runs them concurrently, isolated, with a timeout.

May import: ``profile``, ``patching``, ``transforms`` and the loose modules ``site`` (what the
command acts on), ``errors``, ``states``, ``resources``, ``fsutil``, ``tuples``.
"""
