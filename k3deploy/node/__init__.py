"""One node: the SSH transport (only place importing Fabric/Paramiko), facts, the step context."""
