"""Health checks and their verdicts, judged against per-SKU baselines (data files in checks/baselines)."""
