"""The code Triton runs: the bottom floor, importing nothing from the rest of tritonkit.

``runners/``: the python-backend ``model.py`` files (and the helpers copied beside them) that builds
copy into versions by name and ``tritonkit check`` reads; ``native/``: tritonkit's C++ backend
``tritonkit_torch``, with what compiles it, links it into a server's backend folder and exports the
program it serves. Versions already written keep working when these files change: they carry copies.
"""
