"""babelq inside the frameworks services already run: FastAPI/Starlette (:mod:`.fastapi`),
Django (:mod:`.django`) and Celery (:mod:`.celery`).

Each module imports its framework only when used; install the framework yourself (or the
matching extra, e.g. ``babelq[fastapi]``).
"""
