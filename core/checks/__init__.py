"""Doctor checks, one module per topic. Each module registers its checks with `core.checks.doctor.register_check`;
`core.checks.doctor.discover_checks()` imports every module here, so adding a check is adding a file."""
