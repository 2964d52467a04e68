"""The database of a process started without ``DATABASE_URL`` where no embedded
PostgreSQL stands in for it (the image has no development tools): settings load, and
whatever tries to use the database is told to set ``DATABASE_URL`` (``base``)."""
