"""libcst transforms: one small class per module, each a ``Transform`` taking its parameters in ``__init__``."""
