class DefaultSavePlanner:
    def create_global_plan(self, global_plan, metadata):
        if not _validate_global_plan(global_plan, metadata):
            raise ValueError("Failed to validate global plan")


def _validate_global_plan(global_plan, metadata) -> bool:
    all_good = True
    return all_good
