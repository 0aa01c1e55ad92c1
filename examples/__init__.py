"""The example jobs, shipped as package data (``streamtrain.examples``): ``streamtrain run lr``
runs ``lr.json`` from here, ``streamtrain examples`` lists them and copies one out for editing.
``plugin_reader.py`` is the worked reader plug-in of README "Plug-in readers"."""
