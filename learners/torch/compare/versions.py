"""load(root, *names): the agentrl_learner modules named (e.g. "learner", "modeling") of the tree
at root, imported apart from any other tree's, so that one process holds an old and a new
version side by side."""
import importlib
import sys


def load(root, *names):
    sys.path.insert(0, root)
    try:
        mods = tuple(importlib.import_module("agentrl_learner." + n) for n in names)
    finally:
        sys.path.pop(0)
        for k in [k for k in sys.modules if k.startswith("agentrl_learner")]:
            del sys.modules[k]
    return mods[0] if len(mods) == 1 else mods
