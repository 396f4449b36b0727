"""libcst transforms: one small class per module, each a frozen dataclass of its parameters."""
