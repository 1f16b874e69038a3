"""Call recording for the MATE stand-in."""

CALLS: list = []


def record(name: str, **args) -> None:
    """Remember one call: the function name and its arguments as passed."""
    CALLS.append((name, args))


def reset() -> None:
    """Forget every recorded call."""
    CALLS.clear()
