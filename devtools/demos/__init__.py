"""The demos a new user finds, one per pipeline, each loaded through the services an
operator uses and each idempotent; ``manage.py demo`` runs them. Their files are in
``data/``."""
