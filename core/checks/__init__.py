"""The preflight doctor: `doctor.py` (DoctorContext, run_doctor, the report) and one module per check
topic (vocab rows and freeze range, preprocessing cache, resume, memory). Each topic module registers
its checks with `core.checks.doctor.register_check`; `discover_checks()` imports every module here,
so adding a check is adding a file. Imports the core foundation, `core.tokenizers`, `core.families`,
`core.data` and `core.training`; the trainer, the CLI's `doctor` and the dashboard call it."""
