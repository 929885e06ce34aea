"""What only the notebooks need: the size profile, ``claim``, plots, sliders, exercises."""
