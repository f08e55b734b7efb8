"""Reports people want to look at: a self-contained HTML page and a Markdown summary of a run."""

from gpuval.report.build import write_report

__all__ = ["write_report"]
