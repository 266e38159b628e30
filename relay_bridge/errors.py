class LoweringError(ValueError):
    """An op cannot be lowered: its operands or attributes are impossible. The message
    names the op, the offending value, what was expected and what was given."""
