"""The Kubernetes backend: one Job per sandbox.

- `backend`: `KubernetesBackend`; `job`: the Job and Secret manifests (pure);
- `job_status`: a Job and its Pods read back as an `Observed` (pure);
- `objects`: creating and deleting a sandbox's Job and Secret;
- `calls`: API calls with retries, paged lists, watches; `informer`: the watch-fed cache;
- `api`: the client objects and API errors.
"""
