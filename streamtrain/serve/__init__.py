"""Predictions over HTTP from the live parameters (``streamtrain serve``, or beside ``streamtrain run``).

Modules: ``settings`` (the ``serve`` config section), ``inputs`` (request body → batch),
``cache`` (parameters with bounded staleness), ``publish`` (trainers announce fields and step),
``service`` (model + predict), ``http`` (Starlette/uvicorn), ``run`` (the two entry points).
The HTTP modules need the ``serve`` extra (uvicorn, starlette); importing this package does not.
"""
