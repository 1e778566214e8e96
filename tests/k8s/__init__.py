"""Kubernetes backend, Job builder and Helm chart tests (no cluster)."""
