"""What a value is allowed to be, said once: the words every config section's checks share."""
