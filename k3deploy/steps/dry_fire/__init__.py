"""The dry-fire: the real group on dummy weights while the weights download."""
