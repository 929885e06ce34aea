"""From the lab to a cluster: the TRL bridge (the same loss through TRL's code) and the TRL and
verl recipes that ``export`` writes."""
