"""The Kubernetes backend: one Job per sandbox.

- `backend`: `KubernetesBackend`; `job`: the Job and Secret manifests (pure);
- `calls`: API calls with retries, paged lists, watches; `informer`: the watch-fed cache;
- `api`: the client objects and API errors.
"""
