"""One training loop for every algorithm, its settings, and saving and resuming a run."""
