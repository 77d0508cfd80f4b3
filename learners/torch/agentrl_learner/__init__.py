"""agentrl's reference learner: the learner protocol (docs/learner.md) over PyTorch.

``python -m agentrl_learner --listen 127.0.0.1:PORT --model DIR`` serves one model: Forward,
ForwardBackward, OptimStep, SaveForSampler, SaveState and LoadState, with the RL math left to
agentrl's Go loop. Standard library and torch only.
"""

__version__ = "0.1.0"
