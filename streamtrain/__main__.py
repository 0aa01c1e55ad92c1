"""``python -m streamtrain`` and the ``streamtrain`` command: the process-wide settings
(``streamtrain.startup.apply``, before numpy and numba load), then the command line (``cli``)."""


def entry() -> None:
    from streamtrain import startup
    startup.defer_gc()               # until the job is built (startup.settled)
    startup.apply()
    from streamtrain.cli import entry as command_line
    command_line()


if __name__ == "__main__":           # importing the module runs nothing
    entry()
