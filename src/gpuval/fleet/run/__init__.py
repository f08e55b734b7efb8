"""One fleet check as it runs: from its request to the engine's jobs, the workers' lines read back per node, the
records stored and its outcome (the submitting side), and what the node's worker runs (the node side)."""
