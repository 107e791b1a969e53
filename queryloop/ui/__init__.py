"""``queryloop ui``: the web inspector over the sessions the CLI writes (see docs/ui.md)."""

from .command import UiError, add_ui_command, check_home_owner

__all__ = ["UiError", "add_ui_command", "check_home_owner"]
