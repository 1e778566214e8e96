"""The catalog: templates, suites, batches and stages, read from YAML (pure past reading files).

- `templates`: `Catalog`, `Template`, `load_catalog`;
- `batches`: `WorkItem`, items files, and how a batch template splits into sandboxes;
- `stages`: `Stage`, a staged suite's policies;
- `quantities`: CPU and memory quantities ("500m", "512Mi").
"""
