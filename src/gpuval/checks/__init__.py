"""Health checks: small functions of one shape, each judged through the per-SKU baselines (gpuval.baselines)."""
