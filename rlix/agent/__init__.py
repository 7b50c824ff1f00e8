"""The node agent (DaemonSet): GPU state, phase reports, in-place preemption."""
