"""grpo_lab: a teaching lab for RL post-training of language models.

Its folders are its layers, each importing only from the layers before it (``tests/unit/test_layers.py``
enforces this):

    core       the formulas (advantages, losses, kl, rewards, checks): torch and the standard library only
    io         writing files safely, output-path checks, stopping on a signal (the standard library only)
    lab        the policy, the tasks, sampling and evaluation, pretraining
    algorithms each algorithm as a frozen dataclass of settings, and the presets
    train      one training loop for every algorithm, its config and its checkpoints
    study      many runs: seeds, comparisons, paired ablations, statistics, committed histories
    scale      TRL and verl: the bridge and the exported recipes
    bench      the lab's step time against TRL's
    course     what only the notebooks need: profile, claims, plots, widgets, exercises
    cli        the command line and ``doctor``
"""

__version__ = "0.1.0"
