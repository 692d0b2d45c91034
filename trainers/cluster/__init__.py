"""Cluster job files (SLURM, Kubernetes) that start a run's launch command on every node."""
