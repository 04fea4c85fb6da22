"""Command implementations behind the thin typer CLI (service/cli.py)."""
