"""What a create writes of its publisher's facts (create.lua's info ARGV and its kept
message), checked: text, bounded, valid Unicode."""

from __future__ import annotations

from .._console import TEXT_LIMIT, PublishInfo
from ..errors import invalid

__all__ = ["kept_message_of", "publish_fields"]


def publish_fields(given: PublishInfo | None) -> dict[str, str]:
    """create.lua's info ARGV for what the publisher gave (checked: text, bounded)."""
    if given is None:
        return {}
    if not isinstance(given, PublishInfo):
        raise invalid("info must be a PublishInfo", field="info")
    fields: dict[str, str] = {}
    for field, value in vars(given).items():
        if value is None or field == "message":
            continue
        if not isinstance(value, str) or len(value) > TEXT_LIMIT:
            raise invalid(
                f"info.{field} must be text of at most {TEXT_LIMIT} characters",
                field=f"info.{field}",
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise invalid(
                f"info.{field} must be valid Unicode text", field=f"info.{field}"
            ) from None
        fields[field] = value
    return fields


def kept_message_of(given: PublishInfo | None) -> str:
    """create.lua's ``message``: the kept message of ``given`` ('' for none)."""
    message = None if given is None else given.message
    if message is None:
        return ""
    if not isinstance(message, str) or not message.isascii():
        raise invalid("info.message must be KeptMessage.to_json's text", field="info.message")
    return message
