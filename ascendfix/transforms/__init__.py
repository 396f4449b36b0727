"""transforms: libcst transforms, one small class per module, each a ``Transform`` (parameters in ``__init__``).

May import: the loose modules ``resources`` (the reviewed templates), ``errors`` and ``tuples``. Below
``profile``, which checks a patch file's parameters against a transform's signature.
"""
