"""The compile pipeline: from a Relax module to a target's machine code."""
