"""The operator's dashboard: server-rendered pages (Jinja2) with a little plain JavaScript.

Pages: `/` (runs), `/new` (plan and start), `/runs/{id}`, `/sandboxes/{id}`, `/login`.
Templates and static files ship inside this package; nothing is built with Node.
"""
