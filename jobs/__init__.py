"""The job runner: the Huey queue, job records in SQLite, the worker and its supervised job processes,
crash recovery and progress (the API is `jobs.runner`). It may import `core` and `models`, never
the CLI, the journeys or the dashboard: an entry point hands it a job catalogue (`jobs.kinds.JobCatalogue`,
built from the CLI's parsers) that checks parameters and names each kind's path options; the journeys
also run commands in-process through it. The worker runs the recorded argv and needs no catalogue."""
