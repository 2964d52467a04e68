"""What the CO2 calculator's operations refuse, for the API, the admin and the commands to
turn into answers (400, 409, form errors, CommandError)."""

from __future__ import annotations

import jobs
from intake.csv_validation import ValidationReport


class InvalidRequest(Exception):
    """Bad input, by field: ``{"quantity": ["not a number ('1,5')"]}``."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class UploadRejected(Exception):
    """A file with at least one bad row; nothing was written."""

    def __init__(self, report: ValidationReport, filename: str = "") -> None:
        super().__init__(f"{filename or 'the file'} was refused: {report.summary()}")
        self.report = report


class AlreadyRunning(Exception):
    """Another unfinished job already does this; the request was refused."""

    def __init__(self, job: jobs.Job, message: str) -> None:
        super().__init__(message)
        self.job = job
