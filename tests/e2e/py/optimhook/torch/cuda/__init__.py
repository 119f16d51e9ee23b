"""memory_allocated(): what the program says it holds (allocated[0])."""
allocated = [0]


def memory_allocated(device=None):
    return allocated[0]
