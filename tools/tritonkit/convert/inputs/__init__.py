"""The data of a build: the calibration and evaluation files and built-in sets, read and fitted to the
model's inputs (:mod:`.datasets`), and the checks of them and of the source run before any build work
(:mod:`.preflight`).
"""
