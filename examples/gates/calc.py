"""A tiny module with a bug the gate catches: add() subtracts."""


def add(a: int, b: int) -> int:
    return a - b
