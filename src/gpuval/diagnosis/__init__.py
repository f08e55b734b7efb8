"""Which node is bad, and why: each node against its SKU's baseline (through gpuval.baselines' one judge), its own
history and its peers of the run."""

from gpuval.diagnosis.judge import Diagnosis, Finding, NodeVerdict, RecordBand, diagnose, record_bands, sweep_rows

__all__ = ["Diagnosis", "Finding", "NodeVerdict", "RecordBand", "diagnose", "record_bands", "sweep_rows"]
