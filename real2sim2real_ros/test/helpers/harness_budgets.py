"""Training budgets for harness tests: a whole cell in minutes, not the reported runs' hours
(README results come from `make evaluate`'s full budgets)."""

# Behaviour cloning on 12 scripted demonstrations, no self-imitation, no PPO; 3 twin trials.
TINY = {'demos': 12, 'self_imitation_rounds': 0, 'bc_epochs': 150,
        'ppo': {'iterations': 0}, 'eval_trials': 3}
