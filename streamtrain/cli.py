"""streamtrain run | eval | validate | produce | serve | examples: a streaming online-learning daemon and its tools.

Every option also reads a STREAMTRAIN_* environment variable (shown in each command's --help).
"""
from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
import threading

from . import config as configmod
from . import shipped, startup
from .errors import ConfigError, StreamtrainError
from .graphload import add_graph_parser
from .produce import add_produce_parser
from .version import describe

ENV = "STREAMTRAIN_"
RUN_DESCRIPTION = """\
Train the model of CONFIG on its reader's stream: pull the parameters a mini-batch needs,
learn, push the update, and only then commit the batch's offsets. Runs until the stream ends,
--max-examples is reached, or SIGTERM/SIGINT asks it to stop (it finishes the batch, writes a
checkpoint, and exits; a second signal exits at once). SIGHUP writes a checkpoint. Metrics,
/healthz and /readyz are served on metrics.host:metrics.port."""
RUN_EXIT_CODES = """\
exit codes:
  0  the run ended: stream over, --max-examples reached, or stopped by a first SIGTERM/SIGINT
  1  the run failed; the reason is the last line on stderr (e.g. the store refused the
     password, a reader cannot open its input, a gzip file ends before its end, every line
     of a stream that ended was malformed)
  2  nothing was trained: the config is invalid (every problem is listed), the command line
     or a STREAMTRAIN_* variable is wrong, a port is in use, or --restore names a checkpoint
     that is missing, unreadable or of another model; or a package the job needs is not
     installed (an extra: serve, compression; what was trained before is committed)
  3  the run ended and its offsets were committed, but the final checkpoint could not be
     written (disk full, read-only); the previous checkpoint stays
  a second SIGTERM/SIGINT kills the process with that signal (shell status 128+N)"""


EVAL_DESCRIPTION = """\
Score CONFIG's reader stream with the parameters (and graph) of a checkpoint, without updating
them (no store, no graph, no Kafka offset is written): each batch is predicted and scored by
the loss's progressive figures. Prints the same done line and --summary as run."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep their lines; reStructuredText's ``literal`` quotes are dropped."""

    def format_help(self) -> str:
        return super().format_help().replace("``", "")


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def _env(name, default=None):
    return os.environ.get(ENV + name, default)


def _env_sets() -> list[str]:
    raw = _env("SET", "")
    return [s for s in raw.split(";") if s.strip()]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", default=_env("CONFIG"),
                   help="the job's JSON config, or the name of a shipped example (lr, fm, synthetic, ...: "
                        "streamtrain examples lists them) [env STREAMTRAIN_CONFIG]")
    p.add_argument("--set", dest="sets", action="append", default=_env_sets(), metavar="PATH=VALUE",
                   help="override a config value by dotted path, e.g. reader.path=/data/x.tsv.gz, "
                        "layers.emb.dim=16 (repeatable) [env STREAMTRAIN_SET, ';'-separated]")


def _log_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-format", choices=("text", "json"), default=_env("LOG_FORMAT"),
                   help="log line format (default: config log.format) [env STREAMTRAIN_LOG_FORMAT]")
    p.add_argument("--log-level", default=_env("LOG_LEVEL"),
                   help="logging level (default: config log.level) [env STREAMTRAIN_LOG_LEVEL]")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="streamtrain", description=__doc__)
    parser.add_argument("--version", action="version", version=describe())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = sub.add_parser("run", help="train on a stream until it ends or a signal asks to stop",
                         description=RUN_DESCRIPTION, epilog=RUN_EXIT_CODES)
    _common(run)
    run.add_argument("--max-examples", type=_count, default=_env("MAX_EXAMPLES"), metavar="N",
                     help="stop once the model has seen N examples (a restored checkpoint's count), "
                          "drain, exit 0 [env STREAMTRAIN_MAX_EXAMPLES]")
    run.add_argument("--summary", default=_env("SUMMARY"), metavar="FILE.json",
                     help="write a JSON summary on exit [env STREAMTRAIN_SUMMARY]")
    run.add_argument("--restore", default=_env("RESTORE"), metavar="DIR|latest",
                     help="start from a checkpoint directory, or 'latest' under checkpoint.dir "
                          "[env STREAMTRAIN_RESTORE]")
    _log_flags(run)

    ev = sub.add_parser("eval", help="score a stream with a checkpoint's parameters (and graph), learning nothing",
                        description=EVAL_DESCRIPTION)
    _common(ev)
    ev.add_argument("--restore", default=_env("RESTORE"), metavar="DIR",
                    help="required: the checkpoint, a checkpoint directory or a checkpoint.dir (its latest) "
                         "[env STREAMTRAIN_RESTORE]")
    ev.add_argument("--max-examples", type=_count, default=_env("MAX_EXAMPLES"), metavar="N",
                    help="stop after N examples [env STREAMTRAIN_MAX_EXAMPLES]")
    ev.add_argument("--summary", default=_env("SUMMARY"), metavar="FILE.json",
                    help="write the JSON summary (the keys of run's) on exit [env STREAMTRAIN_SUMMARY]")
    _log_flags(ev)

    srv = sub.add_parser("serve", help="answer predictions over HTTP from the live parameters "
                                       "(serve.host, serve.port; store.backend=redis), or from a checkpoint")
    _common(srv)
    srv.add_argument("--restore", default=_env("SERVE_RESTORE"), metavar="DIR",
                     help="serve this checkpoint (a directory, or a checkpoint.dir: its latest) instead of "
                          "the live Redis parameters; any store's checkpoint [env STREAMTRAIN_SERVE_RESTORE]")
    _log_flags(srv)

    val = sub.add_parser("validate", help="check a config; exit 0, or 2 with every problem listed")
    _common(val)

    add_graph_parser(sub, _common, load_config)
    add_produce_parser(sub)
    shipped.add_examples_parser(sub)
    return parser


def _count(text: str) -> int:
    """A whole number >= 1 (argparse converts a default from the environment with it too)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 (flag or env STREAMTRAIN_MAX_EXAMPLES), "
                                         f"got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value} (flag or env STREAMTRAIN_MAX_EXAMPLES)")
    return value


def _check_log_flags(parser: argparse.ArgumentParser, args) -> None:
    """argparse checks ``choices`` of a flag, not of a default read from the environment."""
    fmt, level = getattr(args, "log_format", None), getattr(args, "log_level", None)
    if fmt not in (None, "text", "json"):
        parser.error(f"--log-format / env STREAMTRAIN_LOG_FORMAT: expected text or json, got {fmt!r}")
    if level is not None and not isinstance(logging.getLevelName(str(level).upper()), int):
        parser.error(f"--log-level / env STREAMTRAIN_LOG_LEVEL: expected DEBUG, INFO, WARNING or ERROR, "
                     f"got {level!r}")


def load_config(args) -> dict:
    if not args.config:
        raise ConfigError([("", "no config given (argument CONFIG or env STREAMTRAIN_CONFIG)")])
    path = shipped.resolve(args.config)
    if os.path.isdir(path):
        raise ConfigError([("", f"{path} is a directory, not a config file")])
    if not os.path.exists(path):
        raise ConfigError([("", f"config file not found: {path} {shipped.missing_hint(path)}")])
    cfg, found, args.inferred = configmod.load_listing(path, args.sets)
    found += configmod.problems(cfg)
    if found:
        raise ConfigError(found, source=args.config)
    for section, key in (("reader", "path"), ("checkpoint", "dir")):   # "~/..." as a shell would read it
        value = (cfg.get(section) or {}).get(key)
        if isinstance(value, str) and value.startswith("~"):
            cfg[section][key] = os.path.expanduser(value)
    return cfg


def main(argv=None) -> int:
    startup.apply()                  # (done already, before numpy loaded, when run as a command)
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_log_flags(parser, args)
    if args.command != "run":
        startup.settled()            # (a job settles once it is built: daemon.run_job)
    try:
        if args.command == "validate":
            load_config(args)
            print(f"{args.config}: ok")
            return 0
        if args.command == "run":
            from .daemon import run_job
            cfg = load_config(args)
            return run_job(cfg, args)
        if args.command == "eval":
            from .evaluation import run_eval
            cfg = load_config(args)
            if not args.restore:
                raise ConfigError([("--restore", "eval needs the checkpoint to score with (--restore DIR)")])
            return run_eval(cfg, args)
        if args.command == "serve":
            from .logs import setup_logging
            from .serve.run import serve_forever
            cfg = load_config(args)
            logcfg = cfg.get("log", {})
            setup_logging(args.log_format or logcfg.get("format", "text"), args.log_level or logcfg.get("level", "INFO"))
            return serve_forever(cfg, args.restore)
        return args.func(args)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return err.exit_code
    except StreamtrainError as err:
        print(f"streamtrain: {err}", file=sys.stderr)
        return err.exit_code


def entry() -> None:
    """The ``streamtrain`` command and ``python -m streamtrain``: ``main``, then the end of the
    process without the interpreter's teardown of every module, which after numba has loaded
    compiled code takes about 0.12 s (a tenth of a 1M-row LR run). What the interpreter does at
    exit that matters still happens, in its order: threads that are not daemons finish
    (``threading._shutdown``: an executor's workers too), atexit functions run (logging's flush,
    an embedded redis-server's stop), the standard streams are flushed. The job itself has
    already drained, pushed, committed, checkpointed and closed its reader and store."""
    _exit(main())


def _exit(rc) -> None:
    if not isinstance(rc, int) or not hasattr(threading, "_shutdown"):
        sys.exit(rc)                             # (a message, or a Python without the hook)
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):            # a closed pipe: nothing more can be said
            pass
    os._exit(rc)


if __name__ == "__main__":
    entry()
