"""Which inbox an e-mail address delivers to, so that one inbox confirms a bounded
number of accounts (``ACCOUNTS_PER_INBOX``) however its address is spelled.

``normalise`` maps the spellings that reach one mailbox to one text:

- **case**: the whole address is case-folded. The standard lets a host treat the
  part before ``@`` as case-sensitive, but no widely used provider does; folding
  errs on the strict side (two people whose addresses differ only in case, at a
  host that tells them apart, share one bound).
- **plus tags**: everything from the first ``+`` of the local part is dropped
  (``ann+1@host`` and ``ann+2@host`` are ``ann@host``), for every host. Gmail,
  Outlook, Fastmail and Proton deliver a ``+tag`` to the untagged mailbox;
  at a host that does not, two people whose names differ only after a ``+`` share
  one bound, which is rare and again errs on the strict side.
- **dots**: removed from the local part only at Gmail (``gmail.com``, and
  ``googlemail.com``, which is the same service), where Google documents that dots
  do not matter. Elsewhere a dot may be part of the name (``a.b`` and ``ab`` can
  be two people), so it stays.
- **the host**: lower-cased, a trailing dot dropped, an international name written
  in its ASCII (IDNA) form.

Not covered, and said so: hosts that deliver other tags (``name-tag`` at some
providers, ``anything@name.fastmail.com``), and forwarding addresses or a
catch-all domain, which can give one person any number of inboxes. The bound makes
sock-puppets cost an inbox each; it cannot make them impossible.

``inbox_hash`` keeps the normalised address as a keyed hash (``ADDRESS_HASH_KEY``,
like the address hashes of the same-person check), so the bound holds after an
account is deleted and its address erased.
"""

from __future__ import annotations

import unicodedata

from django.conf import settings
from django.utils.crypto import salted_hmac

# Hosts where dots in the name do not matter, and the one spelling of each.
DOTLESS_HOSTS = {"gmail.com": "gmail.com", "googlemail.com": "gmail.com"}


def _ascii_host(host: str) -> str:
    host = host.casefold().strip().rstrip(".")
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:  # not a name IDNA can write: keep it as folded
        return host


def normalise(email: str) -> str:
    """The one spelling of the inbox ``email`` delivers to ("" for no address)."""
    text = unicodedata.normalize("NFKC", email or "").strip()
    if not text:
        return ""
    local, at, host = text.rpartition("@")
    if not at or not local or not host:
        return text.casefold()
    local = local.casefold()
    local = local.split("+", 1)[0] or local  # a plus tag; an address that starts with "+" keeps it
    host = _ascii_host(host)
    if host in DOTLESS_HOSTS:
        local, host = local.replace(".", ""), DOTLESS_HOSTS[host]
    return f"{local}@{host}"


def inbox_hash(email: str) -> str:
    """A keyed hash of ``normalise(email)``; "" for no address."""
    inbox = normalise(email)
    if not inbox:
        return ""
    return salted_hmac("dynabench.core.inbox", inbox, secret=settings.ADDRESS_HASH_KEY,
                       algorithm="sha256").hexdigest()
