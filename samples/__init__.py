"""Files shipped with videoqa, installed as `videoqa.samples`: the demo model(s), sample clips with their
questions, and the clip generator the demo model was trained on (`synth`).

The library finds these files with `importlib.resources` (`videoqa.model.packaged_path`), never through
the repository tree, so an installed wheel has them too.
"""
