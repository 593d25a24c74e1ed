"""One module per CLI subcommand, each exposing ``register(parser)`` (its arguments on the parser ``cli`` made,
and ``func``), and the flag groups several commands share (``measure_args``, ``client_args``, ``shared_args``): argparse lives here only."""
