"""Operate inside the scheduler: node state actions (Slurm drain/resume with reason ownership, Kubernetes labels
and taints), Prometheus metrics (node_exporter textfile, an exporter), and the Kubernetes manifests that run
gpuval on every GPU node. Imports only engines-level packages and below (engines, baselines, node, results,
errors); the heavy clients (kubernetes, prometheus_client) are imported inside the functions that use them.
"""
