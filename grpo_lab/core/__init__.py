"""The formulas: advantages, policy and value losses, KL estimators, reward shaping, and the input
checks they share. Torch and the standard library only; nothing here knows about models or runs."""
