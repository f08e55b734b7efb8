"""One Result model for everything gpuval measures, and where records go."""

from gpuval.results.model import SCHEMA_VERSION, Metric, Result, Status, Where, new_run_id, severity, worst_status
from gpuval.results.sink import default_results_path, read_results, save_results

__all__ = [
    "SCHEMA_VERSION",
    "Metric",
    "Result",
    "Status",
    "Where",
    "default_results_path",
    "new_run_id",
    "read_results",
    "save_results",
    "severity",
    "worst_status",
]
