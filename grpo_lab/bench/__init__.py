"""The lab's step time against TRL's, measured fairly."""
