"""`python -m stylus ...` = the `stylus` command. Running `-m stylus.cli.main` instead would load main.py
twice (as __main__ and as stylus.cli.main), and the command modules registered at its bottom import it back."""

from stylus.cli.main import main

main()
