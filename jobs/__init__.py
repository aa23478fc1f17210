"""The job runner: Huey queue, job records, supervised job processes (see jobs.runner)."""
