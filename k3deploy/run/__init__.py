"""Running a playbook over the cluster: runner, playbook loading, live display."""
