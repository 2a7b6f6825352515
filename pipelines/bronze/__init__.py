"""Bronze: the raw change log and snapshot chunks, landed as Delta tables."""
