"""One module per ``esa`` subcommand; each defines ``register(subparsers)``."""
