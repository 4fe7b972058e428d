"""Files shipped with videoqa, installed as `videoqa.samples`: the demo model(s), sample clips with their
questions. The clip generators live in `videoqa.synth`; the training scripts in the repository's scripts/.

The library finds these files with `importlib.resources` (`videoqa.model.packaged_path`), never through
the repository tree, so an installed wheel has them too.
"""
