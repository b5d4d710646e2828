"""`estimator-mnist serve`: TensorFlow Serving's REST API over the exports of a run, and a page to draw digits on.

Each module has one job (docs/development.md); only model.py imports
TensorFlow, and only once the flags and the port have been checked.
"""
