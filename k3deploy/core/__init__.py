"""Used by every layer: errors, logging, redaction, state files, interrupts."""
