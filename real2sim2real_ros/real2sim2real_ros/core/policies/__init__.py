"""Policies (ROS-free): a torch MLP with normalisation and self-contained checkpoints,
behaviour cloning, policy search in the twin with domain randomisation, and evaluation."""
from .policy import CheckpointError, MLPPolicy, load_checkpoint, save_checkpoint

__all__ = ['CheckpointError', 'MLPPolicy', 'load_checkpoint', 'save_checkpoint']
