"""Experiments on the loop: many seeds and algorithms in child processes, paired ablations,
the statistics that tell an effect from noise, and the committed run histories."""
